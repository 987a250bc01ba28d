"""Watch: events from a resourceVersion, selectors, timeouts, bookmarks and Helm's initial-events-end."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import pytest
from lightkube import Client, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap
from lightkube.types import PatchType

from styrmin_localcluster import LocalCluster

from .conftest import CATALOG, http_client


def _events(
    http: httpx.Client, path: str, params: dict[str, str], until: int, timeout: float = 10
) -> list[dict]:
    """Read watch events until `until` of them arrived (or the server ends the stream)."""
    events: list[dict] = []
    with http.stream("GET", path, params={"watch": "true", **params}, timeout=timeout) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        for line in response.iter_lines():
            if line:
                events.append(json.loads(line))
                if len(events) >= until:
                    break
    return events


def test_watch_from_a_resource_version_replays_later_changes(
    http: httpx.Client, client: Client, namespace: str
) -> None:
    created = client.create(ConfigMap(metadata=ObjectMeta(name="w1"), data={"v": "1"}), namespace=namespace)
    client.patch(ConfigMap, "w1", {"data": {"v": "2"}}, namespace=namespace, patch_type=PatchType.MERGE)
    client.delete(ConfigMap, "w1", namespace=namespace)
    events = _events(
        http,
        f"/api/v1/namespaces/{namespace}/configmaps",
        {"resourceVersion": created.metadata.resourceVersion},
        until=2,
    )
    assert [e["type"] for e in events] == ["MODIFIED", "DELETED"]
    assert events[0]["object"]["data"] == {"v": "2"}


def test_watch_without_resource_version_starts_with_current_objects(
    http: httpx.Client, client: Client, namespace: str
) -> None:
    client.create(
        ConfigMap(metadata=ObjectMeta(name="present", labels={"w": "y"}), data={}), namespace=namespace
    )
    events = _events(http, f"/api/v1/namespaces/{namespace}/configmaps", {"labelSelector": "w=y"}, until=1)
    assert events[0]["type"] == "ADDED" and events[0]["object"]["metadata"]["name"] == "present"


def test_lightkube_watch_sees_live_changes(client: Client, namespace: str) -> None:
    start = client.create(ConfigMap(metadata=ObjectMeta(name="live-0"), data={}), namespace=namespace)

    def change() -> None:
        time.sleep(0.2)
        client.create(ConfigMap(metadata=ObjectMeta(name="live-1"), data={}), namespace=namespace)
        client.patch(
            ConfigMap, "live-1", {"data": {"a": "b"}}, namespace=namespace, patch_type=PatchType.MERGE
        )

    threading.Thread(target=change).start()
    seen = []
    for event_type, obj in client.watch(
        ConfigMap, namespace=namespace, resource_version=start.metadata.resourceVersion
    ):
        seen.append((event_type, obj.metadata.name))
        if len(seen) == 2:
            break
    assert seen == [("ADDED", "live-1"), ("MODIFIED", "live-1")]


def test_watch_of_one_name_and_label_changes(http: httpx.Client, client: Client, namespace: str) -> None:
    created = client.create(
        ConfigMap(metadata=ObjectMeta(name="pick", labels={"on": "yes"}), data={}), namespace=namespace
    )
    client.create(
        ConfigMap(metadata=ObjectMeta(name="other", labels={"on": "yes"}), data={}), namespace=namespace
    )
    client.patch(
        ConfigMap,
        "pick",
        {"metadata": {"labels": {"on": "no"}}},
        namespace=namespace,
        patch_type=PatchType.MERGE,
    )
    events = _events(
        http,
        f"/api/v1/namespaces/{namespace}/configmaps",
        {"resourceVersion": created.metadata.resourceVersion, "labelSelector": "on=yes"},
        until=2,
    )
    # "other" was added; "pick" left the selection, which a watch reports as DELETED.
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "other"),
        ("DELETED", "pick"),
    ]
    events = _events(
        http,
        f"/api/v1/namespaces/{namespace}/configmaps",
        {"fieldSelector": "metadata.name=other", "timeoutSeconds": "1"},
        until=5,
    )
    assert [e["object"]["metadata"]["name"] for e in events] == ["other"]


def test_timeout_seconds_ends_the_stream(http: httpx.Client, namespace: str) -> None:
    started = time.monotonic()
    events = _events(http, f"/api/v1/namespaces/{namespace}/configmaps", {"timeoutSeconds": "1"}, until=100)
    assert 0.9 <= time.monotonic() - started < 5
    assert all(e["type"] == "ADDED" for e in events)


def test_send_initial_events_ends_with_the_initial_events_end_bookmark(
    http: httpx.Client, client: Client, namespace: str
) -> None:
    for index in range(3):
        client.create(
            ConfigMap(metadata=ObjectMeta(name=f"init-{index}", labels={"i": "1"}), data={}),
            namespace=namespace,
        )
    events = _events(
        http,
        f"/api/v1/namespaces/{namespace}/configmaps",
        {
            "sendInitialEvents": "true",
            "allowWatchBookmarks": "true",
            "resourceVersionMatch": "NotOlderThan",
            "labelSelector": "i=1",
        },
        until=4,
    )
    assert [e["type"] for e in events] == ["ADDED", "ADDED", "ADDED", "BOOKMARK"]
    bookmark = events[3]["object"]
    assert bookmark["kind"] == "ConfigMap"
    assert bookmark["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert int(bookmark["metadata"]["resourceVersion"]) >= max(
        int(e["object"]["metadata"]["resourceVersion"]) for e in events[:3]
    )


def test_idle_watch_gets_periodic_bookmarks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # An in-process cluster, so that the bookmark interval can be shortened for the test.
    from styrmin_localcluster import watch

    monkeypatch.setattr(watch, "BOOKMARK_INTERVAL", 0.2)
    with LocalCluster(tmp_path / "cluster", [CATALOG], in_process=True) as cluster:
        kube = Client(KubeConfig.from_file(cluster.kubeconfig_path))
        current = kube.list(ConfigMap, namespace="default")
        list(current)
        kube.close()
        seen = []
        with (
            http_client(cluster.kubeconfig_path) as session,
            session.stream(
                "GET",
                "/api/v1/namespaces/default/configmaps",
                params={
                    "watch": "1",
                    "allowWatchBookmarks": "True",
                    "resourceVersion": current.resourceVersion,
                    "timeoutSeconds": "2",
                },
            ) as response,
        ):
            for line in response.iter_lines():
                if line:
                    seen.append(json.loads(line))
                if len(seen) == 2:
                    break
    assert [e["type"] for e in seen] == ["BOOKMARK", "BOOKMARK"]
    assert int(seen[0]["object"]["metadata"]["resourceVersion"]) >= int(current.resourceVersion)


def test_watch_from_a_compacted_resource_version_is_410_gone(http: httpx.Client, namespace: str) -> None:
    events = _events(http, f"/api/v1/namespaces/{namespace}/configmaps", {"resourceVersion": "-5"}, until=1)
    assert events[0]["type"] == "ERROR"
    assert events[0]["object"]["code"] == 410 and events[0]["object"]["reason"] == "Expired"
