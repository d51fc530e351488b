"""crate-zoo: white-box transformers (CRATE and relatives) as timm models.

``import crate`` registers the zoo with timm: ``timm.list_models("crate*")``.
"""

from . import layers, models

__version__ = "0.1.0"
__all__ = ["layers", "models", "__version__"]
