"""The agent: runs the changes of the deployments of its cluster."""
