"""Actions of the shop driver: create the database at setup, migrate it during an upgrade, back it up
and restore it."""

from prefect import flow, get_run_logger

from styrmin_backend.actions import (
    GlobalContext,
    execute_backup_commands,
    execute_commands,
    get_component_images,
    start_components,
    stop_components,
    upgrade_deployment_version,
)


@flow
async def initialize_database(context: GlobalContext) -> None:
    logger = get_run_logger()
    images = await get_component_images(component="server", context=context)
    await execute_commands(["shop", "migrate"], image=images[0], context=context, env_from_component="server")
    logger.info("Database created")


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
        ["shop", "migrate"],
        image=f"{image_base}:{target_version}",
        context=context,
        env_from_component="server",
    )
    await start_components(components=["task-worker"], context=context)
    logger.info("Upgrade complete")


@flow
async def back_up_database(context: GlobalContext) -> None:
    images = await get_component_images(component="server", context=context)
    await execute_backup_commands(
        ["shop", "backup"], image=images[0], context=context, env_from_component="server"
    )
    get_run_logger().info("Database backed up")


@flow
async def restore_database(context: GlobalContext) -> None:
    # Styrmin brought the application back to the backup's version first: the server's image runs it.
    await stop_components(components=["task-worker"], context=context)
    images = await get_component_images(component="server", context=context)
    await execute_backup_commands(
        ["shop", "restore"], image=images[0], context=context, env_from_component="server"
    )
    await start_components(components=["task-worker"], context=context)
    get_run_logger().info("Database restored")
