"""The env var name rule, applied the same by the API, the driver's configuration and the web form."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from styrmin_backend.api.schemas import ConfigurationIn
from styrmin_backend.domain.deployments import is_env_var_name, later_revision_wins, next_revision
from styrmin_backend.drivers import DeploymentConfiguration

# Names the API refused while the driver's configuration (and Kubernetes) accepted them, and names
# every side refuses.
ACCEPTED = ["DB_URL", "_private", "my.app-key", "A-B", ".hidden", "-dash", "x" * 256]
REFUSED = ["1BAD", "A=B", "", "with space", "ünicode", "x" * 257]


@pytest.mark.parametrize("name", ACCEPTED)
def test_the_api_and_the_configuration_accept_the_same_env_var_names(name: str) -> None:
    assert is_env_var_name(name)
    assert ConfigurationIn(env={"server": {name: "v"}}).env["server"] == {name: "v"}
    assert DeploymentConfiguration(env={"server": {name: "v"}}).env["server"] == {name: "v"}


@pytest.mark.parametrize("name", REFUSED)
def test_the_api_and_the_configuration_refuse_the_same_env_var_names_naming_them(name: str) -> None:
    assert not is_env_var_name(name)
    with pytest.raises(ValidationError, match="is not an env var name"):
        ConfigurationIn(env={"server": {name: "v"}})
    with pytest.raises(ValidationError, match="is not an env var name"):
        DeploymentConfiguration(env={"server": {name: "v"}})


def test_revisions_only_grow_and_the_later_one_in_the_cluster_wins() -> None:
    assert next_revision(3) == 4
    assert later_revision_wins(5, 4)
    assert not later_revision_wins(4, 4)
    assert not later_revision_wins(None, 1)
