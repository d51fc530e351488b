"""The zoo's benchmarks and the research tables behind the docs' figures; run each from the repository's root as
``python -m benchmarks.<name>``. For users: ``throughput``, ``flops``, ``attention_scaling``, ``input_path``,
``layer_objective_cost``. The docs' tables: ``zoo_table``, ``controls_table``, ``along_training``,
``objective_tradeoff``, ``simdino_eval``, ``default_job``, ``svm_baseline``. Data: ``cifar10_subset``,
``held_out_folders``. Shared: ``common`` (the repository's root, a timed fit, a seeded image folder, the machine a
figure was measured on) and ``official_layouts`` (the official models, re-implemented as references)."""
