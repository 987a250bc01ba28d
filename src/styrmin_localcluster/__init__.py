"""An embedded Kubernetes-API-compatible local cluster whose pods run as local processes.

Styrmin reaches it only through the kubeconfig it writes, exactly like a real cluster. See
docs/localcluster.md for what it serves, the image catalog format and what it does not do.
"""

from .catalog import CatalogError, ImageCatalog
from .cluster import LocalCluster, LocalClusterError

__all__ = ["CatalogError", "ImageCatalog", "LocalCluster", "LocalClusterError"]
