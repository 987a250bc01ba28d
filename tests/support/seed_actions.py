"""The upgrade action of the lifecycle documentation, character for character (it must run unchanged)."""
# ruff: noqa: I001  (the import block is kept as the documentation prints it)

from prefect import flow, get_run_logger
from styrmin_backend.actions import (
    GlobalContext,
    execute_commands,
    get_component_images,
    start_components,
    stop_components,
    upgrade_deployment_version,
)


@flow
async def upgrade(context: GlobalContext, target_version: str) -> None:
    logger = get_run_logger()
    await stop_components(components=["task-worker"], context=context)
    await upgrade_deployment_version(target_version=target_version, context=context)

    images = await get_component_images(component="server", context=context)
    # images[0] is the component container's image; drop any digest, then the tag
    # (a ":" followed by a "/" is a registry port, not a tag).
    name = images[0].split("@", 1)[0]
    repository, separator, tag = name.rpartition(":")
    image_base = repository if separator and "/" not in tag else name

    await execute_commands(
        ["infrahub", "db", "migrate"],
        image=f"{image_base}:{target_version}",
        context=context,
        env_from_component="server",
    )
    await start_components(components=["task-worker"], context=context)
    logger.info("Upgrade complete")
