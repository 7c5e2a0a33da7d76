"""The cluster inventory: models, loading with complete validation, derived views."""

from bootstrap.inventory.loader import LoadResult, check_inventory, load_inventory, validate_data
from bootstrap.inventory.models import Inventory, Node, Role

__all__ = ["Inventory", "LoadResult", "Node", "Role", "check_inventory", "load_inventory", "validate_data"]
