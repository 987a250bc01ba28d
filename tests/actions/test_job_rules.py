"""Small rules of execute_commands' Jobs, without a cluster."""

from __future__ import annotations

import re

from styrmin_backend.actions.commands import _job_name, _set_env


def test_job_name_is_the_deployment_the_commands_last_word_and_a_suffix() -> None:
    assert re.fullmatch(r"shop-migrate-[0-9a-f]{4}", _job_name("shop", ["shop", "migrate"]))
    assert re.fullmatch(r"shop-echo-hi-[0-9a-f]{4}", _job_name("shop", ["sh", "-c", "echo hi", "7"]))


def test_job_name_fits_a_label_value_for_long_deployment_names() -> None:
    name = _job_name("d" * 53, ["run-a-very-long-subcommand-name"])
    assert len(name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)


def test_set_env_replaces_in_place_and_adds_at_the_end() -> None:
    env = [
        {"name": "A", "value": "1"},
        {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
    ]
    assert _set_env(env, {"B": "2", "C": "3"}) == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "2"},
        {"name": "C", "value": "3"},
    ]
    assert env[1]["valueFrom"]  # the workload's list is left as it was
