"""timm-registered architectures of the zoo, one family per file; importing registers them."""

from .attention_variants import CRATE_VARIANTS, VIT_VARIANTS
from .cbt import cbt_block
from .checkpoint import (
    Checkpoint,
    file_sha256,
    read_checkpoint,
    recorded_settings,
    settings_built_from_file,
    weights_file,
)
from .compact import COMPACT_SHAPES, CompactViT
from .convert import CheckpointError, checkpoint_filter_fn
from .crate import CRATE, CrateBlock
from .crate_ablations import CrateAttentionOnlyBlock, CrateMLPBlock
from .crate_alpha import CrateAlphaBlock
from .crate_mae import CrateMAE, CrateMAEDecoderBlock
from .factory import check_model_kwargs, create_classifier
from .hub import hub_weights, is_hub_name
from .names import architecture_of, check_model_name, in_zoo, names_weights_tag, pretrained_tags
from .tost import ToST, ToSTBlock
from .vit import ViTTwin

__all__ = [
    "architecture_of",
    "in_zoo",
    "CRATE",
    "CRATE_VARIANTS",
    "COMPACT_SHAPES",
    "CompactViT",
    "cbt_block",
    "Checkpoint",
    "CheckpointError",
    "CrateAlphaBlock",
    "CrateAttentionOnlyBlock",
    "CrateBlock",
    "CrateMAE",
    "CrateMAEDecoderBlock",
    "CrateMLPBlock",
    "ToST",
    "ToSTBlock",
    "VIT_VARIANTS",
    "ViTTwin",
    "check_model_kwargs",
    "check_model_name",
    "create_classifier",
    "file_sha256",
    "hub_weights",
    "is_hub_name",
    "names_weights_tag",
    "checkpoint_filter_fn",
    "pretrained_tags",
    "read_checkpoint",
    "recorded_settings",
    "settings_built_from_file",
    "weights_file",
]
