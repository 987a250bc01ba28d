"""The rendered diff of a preview: objects matched by kind and name, and no secret value in any diff."""

from __future__ import annotations

import base64
from typing import Any

from styrmin_backend.domain.manifest_diff import (
    SECRET_CHANGED,
    SECRET_EARLIER,
    SECRET_UNCHANGED,
    ObjectChange,
    conceal_configuration_pair,
    diff_manifests,
)


def _deployment(image: str, env: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "server", "image": image, "env": env or []}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "shop-server"},
        "spec": {"template": {"spec": {"containers": [container]}}},
    }


def _secret(data: dict[str, str]) -> dict[str, Any]:
    encoded = {key: base64.b64encode(value.encode()).decode() for key, value in data.items()}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "shop-env"}, "data": encoded}


def test_objects_are_added_changed_removed_or_unchanged() -> None:
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shop"}, "data": {"a": "1"}}
    old = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "old"}}
    new = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "new"}}

    diffs = diff_manifests([_deployment("shop:1"), config, old], [_deployment("shop:2"), config, new])

    assert [(d.kind, d.name, d.change) for d in diffs] == [
        ("Deployment", "shop-server", ObjectChange.CHANGED),
        ("ConfigMap", "shop", ObjectChange.UNCHANGED),
        ("Service", "new", ObjectChange.ADDED),
        ("Service", "old", ObjectChange.REMOVED),
    ]
    assert (
        "-    - image: shop:1" in diffs[0].diff.replace("      ", "    ") or "image: shop:1" in diffs[0].diff
    )
    assert "+" in diffs[0].diff and "shop:2" in diffs[0].diff
    assert diffs[1].diff == ""


def test_secret_data_shows_only_whether_each_value_changed() -> None:
    before = _secret({"server.API_TOKEN": "first-token", "server.DB_PASSWORD": "same-password"})
    after = _secret({"server.API_TOKEN": "second-token", "server.DB_PASSWORD": "same-password"})

    (diff,) = diff_manifests([before], [after])

    assert diff.change is ObjectChange.CHANGED
    assert f"-  server.API_TOKEN: '{SECRET_EARLIER}'" in diff.diff
    assert f"+  server.API_TOKEN: '{SECRET_CHANGED}'" in diff.diff
    for value in ("first-token", "second-token", "same-password"):
        assert value not in diff.diff
        assert base64.b64encode(value.encode()).decode() not in diff.diff


def test_a_secret_env_value_in_a_container_is_masked_by_its_name() -> None:
    before = _deployment("shop:1", [{"name": "DB_PASSWORD", "value": "hunter2-old"}])
    after = _deployment(
        "shop:1", [{"name": "DB_PASSWORD", "value": "hunter2-new"}, {"name": "LEVEL", "value": "debug"}]
    )

    (diff,) = diff_manifests([before], [after])

    assert "hunter2" not in diff.diff
    assert SECRET_CHANGED in diff.diff
    assert "+          value: debug" in diff.diff


def test_a_configuration_s_secret_env_var_shows_as_changed_or_unchanged() -> None:
    before = {"values": {"db": {"password": "p1"}}, "images": {}, "env": {"server": {"API_TOKEN": "t1"}}}
    after = {"values": {"db": {"password": "p1"}}, "images": {}, "env": {"server": {"API_TOKEN": "t2"}}}

    shown_before, shown_after = conceal_configuration_pair(before, after)

    assert shown_after["values"]["db"]["password"] == SECRET_UNCHANGED
    assert shown_after["env"]["server"]["API_TOKEN"] == SECRET_CHANGED
    assert shown_before is not None and shown_before["env"]["server"]["API_TOKEN"] == SECRET_EARLIER


def test_the_diffs_together_are_cut_at_the_line_budget() -> None:
    before = [_deployment(f"shop:{n}") | {"metadata": {"name": f"w{n}"}} for n in range(5)]
    after = [_deployment(f"shop:{n + 1}") | {"metadata": {"name": f"w{n}"}} for n in range(5)]

    diffs = diff_manifests(before, after, max_lines=12)

    assert sum(len(d.diff.splitlines()) for d in diffs) <= 12
    assert any(d.diff_truncated for d in diffs)


def _config_file(text: str, encoded: str = "") -> dict[str, Any]:
    data = {"app.properties": text, **({"encoded": encoded} if encoded else {})}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shop-config"}, "data": data}


def _b64(value: str) -> str:
    return base64.b64encode(value.encode()).decode()


def test_a_secret_value_a_chart_writes_into_a_config_file_is_masked_and_the_rest_of_the_file_shown() -> None:
    before = _config_file("db.host=db\ndb.password=old-pass-1\nworkers=2\n", _b64("old-pass-1"))
    after = _config_file("db.host=db\ndb.password=new-pass-2\nworkers=4\n", _b64("new-pass-2"))

    (diff,) = diff_manifests([before], [after], secrets={"old-pass-1", "new-pass-2"})

    for value in ("old-pass-1", "new-pass-2", _b64("old-pass-1"), _b64("new-pass-2")):
        assert value not in diff.diff
    assert f"db.password={SECRET_EARLIER}" in diff.diff and f"db.password={SECRET_CHANGED}" in diff.diff
    assert f"+  encoded: '{SECRET_CHANGED}'" in diff.diff
    assert "workers=2" in diff.diff and "workers=4" in diff.diff  # what is not secret stays readable


def test_a_config_file_whose_secret_value_stayed_shows_it_unchanged() -> None:
    before = _config_file("db.password=same-pass\nworkers=2\n")
    after = _config_file("db.password=same-pass\nworkers=4\n")

    (diff,) = diff_manifests([before], [after], secrets={"same-pass"})

    assert "same-pass" not in diff.diff
    assert f"   app.properties: 'db.password={SECRET_UNCHANGED}" in diff.diff  # a context line: the same
    assert "-    workers=2" in diff.diff and "+    workers=4" in diff.diff


def test_a_secret_data_value_holding_no_known_secret_is_still_masked_whole() -> None:
    # Generated by the chart (randAlphaNum), so unknown to Styrmin: a Secret's data is masked whatever it holds.
    after = _secret({"generated": "made-by-the-chart"})

    (diff,) = diff_manifests([], [after], secrets={"some-other-secret"})

    assert "made-by-the-chart" not in diff.diff and _b64("made-by-the-chart") not in diff.diff
