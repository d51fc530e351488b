# The README's two commands: `make train` (the default job) and `make test` (the test suite).
# Each creates .venv with pip when it is missing and installs the project into it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup train test test-fast lint clean checkpoints report bench zoo-table attention-scaling

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e ".[dev]"
	touch $(STAMP)

setup: $(STAMP)

train: $(STAMP)
	$(PY) train.py fit --config configs/crate_nano_digits.yaml

test: $(STAMP)
	$(PY) -m pytest -q

# The quick loop: everything but the tests that run train.py or worker processes (marked slow).
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) lightning_logs logs *.egg-info

# The checkpoints that ship in checkpoints/ (pretrained tags <model>.digits): train each on the embedded
# digits at the 32 pixels their names promise, with the default recipe otherwise (the ViT twins with
# theirs; the micro sizes for 20 epochs, not 40, to keep CPU time down), then export the final weights
# (stored as float16) with a card.
SHIPPED ?= crate_nano_patch4_32 crate_alpha_nano_patch4_32 vit_nano_patch4_32 \
	crate_micro_patch4_32 crate_alpha_micro_patch4_32 vit_micro_patch4_32
checkpoints: $(STAMP)
	set -e; for m in $(SHIPPED); do \
	  case $$m in vit_*) cfg=configs/vit_nano_digits.yaml;; *) cfg=configs/crate_nano_digits.yaml;; esac; \
	  case $$m in *micro*) epochs=20;; *) epochs=40;; esac; \
	  cmd="python train.py fit --config $$cfg --model.model_name $$m --trainer.max_epochs $$epochs --data.img_size 32 --run_name $$m.digits --log_root logs/zoo"; \
	  rm -rf logs/zoo/$$m.digits; \
	  $(VENV)/bin/$$cmd --trainer.enable_progress_bar false; \
	  $(PY) -m crate.export logs/zoo/$$m.digits/version_0/checkpoints/last.ckpt \
	    --out checkpoints/$$m.digits.safetensors --dtype float16 --train-command "$$cmd"; \
	done

# The interpretability report of the shipped crate_nano_patch4_32.digits against its ViT twin (docs/interpret/).
report: $(STAMP)
	$(PY) -m crate.interpret --model crate_nano_patch4_32.digits --data digits --out docs/interpret \
	  --compare vit_nano_patch4_32.digits -

# Throughput of every CPU-scale family and CRATE-T/16 against the official layout, fp32 and bf16, eager
# and compiled, in one run (benchmarks/results/latest.json; several minutes, compilation included).
bench: $(STAMP)
	$(PY) benchmarks/throughput.py

zoo-table: $(STAMP)
	$(PY) benchmarks/zoo_table.py

attention-scaling: $(STAMP)
	$(PY) benchmarks/attention_scaling.py
