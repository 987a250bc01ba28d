"""Names of the steps Styrmin records for its own operations (hook steps: see ``hooks``)."""

from __future__ import annotations

INSTALL_STEP = "Install the application"
"""The setup hook's core: Styrmin's own Helm install, waiting until the components are ready."""


APPLY_CONFIGURATION_STEP = "Apply the configuration"
APPLY_VERSION_STEP = "Upgrade the chart"
"""The step of an upgrade that an action started: Styrmin's Helm upgrade to the target, no hooks."""
STOP_STEP = "Stop components"
START_STEP = "Start components"
UNINSTALL_STEP = "Uninstall the application"


def later_revision_note(cluster_revision: int, change_revision: int) -> str:
    """The note of a step whose change found a later revision already in the cluster."""
    return (
        f"The cluster already holds revision {cluster_revision} of this deployment, written by a later "
        f"change; revision {change_revision} leaves the StyrminDeployment and the chart unchanged and "
        "still runs its own hooks."
    )
