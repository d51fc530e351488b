"""Small trained checkpoints shipped with crate-zoo (installed as ``crate.checkpoints``).

Each ``<model>.<tag>.safetensors`` has a model card ``<model>.<tag>.md`` and ``<model>.<tag>.json`` next
to it, and is registered with timm as the pretrained tag ``<model>.<tag>``.
"""
