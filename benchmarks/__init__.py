"""The zoo's benchmarks and the research tables behind the docs' figures, each run from the repository's root as
``python -m benchmarks.<name>``.

For users (how fast, how large):
    throughput          training-step and inference throughput against a literal reference of the official layout
    flops               FLOPs counted the same way on every torch release
    attention_scaling   one attention layer's time against the number of tokens
    input_path          images per second of a JPEG folder through each input path, beside the steps they feed
    layer_objective_cost  what the layer-objective term costs a training step

The research tables (the docs' figures, each written with its command):
    zoo_table, controls_table, along_training, objective_tradeoff, simdino_eval, default_job, svm_baseline

Data preparation: cifar10_subset, held_out_folders. What they share: common (the repository's root, one way to
time a fit, the machine a figure was measured on); official_layouts (the official models, re-implemented).
"""
