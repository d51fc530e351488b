"""The front door: the README stays short and its commands name what exists, the docs site builds strictly,
and every generated table is what its command writes from the committed files."""

from __future__ import annotations

import csv
import os
import re
import shlex
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import docs_tables
import pytest
from conftest import REPO

README = REPO / "README.md"
PLACEHOLDERS = re.compile(r"^(DIR|PATH|RUN|NAME|OUT|CKPT)\b|[A-Z]{3,}|\$")


def _bash_lines(text: str) -> list[str]:
    """The commands of the ```bash blocks, continuation lines joined, comments dropped."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            line = line.split("  #")[0].strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def _unlisted_flags(words: list[str], program_main, capsys) -> set[str]:
    """The flags of a command line that its program's --help does not list."""
    with pytest.raises(SystemExit) as done:
        program_main(["--help"])
    assert done.value.code == 0
    listed = set(re.findall(r"--[a-z][a-z-]*", capsys.readouterr().out))
    return {word for word in words if re.fullmatch(r"--[a-z][a-z-]*", word)} - listed


def test_the_readme_is_read_in_five_minutes() -> None:
    assert len(README.read_text().splitlines()) <= 200


def test_every_readme_command_names_targets_files_and_modules_that_exist() -> None:
    makefile = (REPO / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):", makefile, re.M))
    commands = _bash_lines(README.read_text())
    assert len(commands) >= 10
    checked = 0
    for command in commands:
        words = shlex.split(command)
        if words[0] == "make":
            assert words[1] in targets, command
            checked += 1
        for index, word in enumerate(words):
            if word == "-m":
                module = words[index + 1]
                assert (REPO / Path(*module.split("."))).with_suffix(".py").is_file() or (
                    REPO / Path(*module.split(".")) / "__main__.py"
                ).is_file(), command
                checked += 1
            elif re.search(r"\.(ya?ml|py|sbatch)$", word) and not PLACEHOLDERS.search(word):
                assert (REPO / word.removeprefix(".venv/bin/python ")).is_file(), (word, command)
                checked += 1
    assert checked >= 20


def test_every_readme_train_command_parses_with_its_settings(tmp_path: Path) -> None:
    """Each train.py line of the README, placeholders given real values, passes LightningCLI's parser
    (``--print_config`` stops before anything runs): every key and value the README shows exists."""
    from conftest import run_in_process

    fills = {"DIR": str(tmp_path), "PATH.ckpt": str(tmp_path / "x.ckpt"), "/data/imagenet": str(tmp_path)}
    runs = [c for c in _bash_lines(README.read_text()) if "train.py" in c and "torchrun" not in c]
    assert len(runs) >= 6
    for command in runs:
        words = shlex.split(command)
        program = next(w for w in words if w in ("train.py", "pretrain.py"))
        args = [fills.get(w, w) for w in words[words.index(program) + 1 :]]
        if "--print_config" not in args:
            args.append("--print_config")
        result = run_in_process(*args, program=program)
        assert result.returncode == 0, (command, result.stderr[-2000:])
        assert "model_name" in result.stdout, command  # the printed config
    mistyped = run_in_process(
        "fit", "--config", "configs/crate_nano_digits.yaml", "--trainer.max_epoch", "1", "--print_config"
    )
    assert mistyped.returncode == 2  # the check can fail: a key that does not exist is refused before printing


def test_every_tutorial_command_names_what_exists_and_parses(tmp_path: Path, capsys) -> None:
    """The tutorial's steps in order: the make target exists, each train.py line passes LightningCLI's parser, and
    every flag its export and report lines pass is one their programs list in --help."""
    from conftest import run_in_process

    import crate.export
    import crate.interpret.__main__

    makefile = (REPO / "Makefile").read_text()
    programs = {"crate.export": crate.export.main, "crate.interpret": crate.interpret.__main__.main}
    seen = []
    for command in _bash_lines((REPO / "docs" / "tutorial.md").read_text()):
        words = shlex.split(command)
        if words[0] == "make":
            assert re.search(rf"^{words[1]}:", makefile, re.M), command
            seen.append("make")
        elif "train.py" in words:
            result = run_in_process(*words[words.index("train.py") + 1 :], "--print_config")
            assert result.returncode == 0, (command, result.stderr[-2000:])
            seen.append("train.py")
        else:
            module = words[words.index("-m") + 1]
            assert _unlisted_flags(words, programs[module], capsys) == set(), command
            assert any(word.startswith("--") for word in words), command
            seen.append(module)
    assert seen == ["make", "train.py", "crate.export", "crate.interpret", "crate.interpret"]


def test_every_command_of_the_other_docs_pages_names_what_exists_and_parses(tmp_path: Path, capsys) -> None:
    """The bash blocks of every docs page (the tutorial's are checked in order above): make targets and scripts
    exist, each train.py / pretrain.py line (under torchrun too) passes LightningCLI's parser with its
    placeholders given real values, and every flag a crate.export / crate.interpret / crate.results line passes is
    one its program lists in --help. A page that keeps a command after its flag or config was renamed fails."""
    from conftest import run_in_process

    import crate.export
    import crate.interpret.__main__
    import crate.results

    programs = {
        "crate.export": crate.export.main,
        "crate.interpret": crate.interpret.__main__.main,
        "crate.results": crate.results.main,
    }
    makefile = (REPO / "Makefile").read_text()
    folder = str(tmp_path)
    fills = {"DIR": folder, "/data/imagenet": folder, "/path/to/imagenet": folder, "PATH.ckpt": folder + "/x.ckpt"}
    checked: dict[str, int] = {}
    for page in sorted((REPO / "docs").glob("*.md")):
        if page.name == "tutorial.md":
            continue
        variables: dict[str, str] = {}
        for command in _bash_lines(page.read_text()):
            words = shlex.split(command)
            if len(words) == 1 and re.fullmatch(r"[A-Z_]+=\S+", words[0]):  # CKPT=...: used as $CKPT below
                name, _, value = words[0].partition("=")
                variables[name] = value
                continue
            words = [variables.get(word[1:], word) if word.startswith("$") else word for word in words]
            where = f"{page.name}: {command}"
            if words[0] in ("git", "sbatch"):
                assert words[0] == "git" or (REPO / words[1]).is_file(), where
                kind = words[0]
            elif words[0] == "make":
                assert re.search(rf"^{words[1]}:", makefile, re.M), where
                kind = "make"
            elif program := next((word for word in words if word in ("train.py", "pretrain.py")), None):
                args = [fills.get(word, word) for word in words[words.index(program) + 1 :]]
                result = run_in_process(
                    *args, *(() if "--print_config" in args else ("--print_config",)), program=program
                )
                assert result.returncode == 0, (where, result.stderr[-2000:])
                kind = program
            else:
                module = words[words.index("-m") + 1]
                assert _unlisted_flags(words, programs[module], capsys) == set(), where
                kind = module
            checked[kind] = checked.get(kind, 0) + 1
    assert checked.get("train.py", 0) >= 15 and checked.get("pretrain.py", 0) >= 4 and checked.get("crate.export")


def test_the_tutorial_s_python_classifies_a_digit_with_a_digits_file(tmp_path: Path, monkeypatch, capsys) -> None:
    """The tutorial's Python block, run as written on the shipped digits CRATE (the same architecture, 1 channel)
    in place of the reader's export: it prints the label it predicts for the first digit, '0', with its
    probability. A transform other than the file's own would feed the model images it was not trained on."""
    block = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "tutorial.md").read_text(), re.S)
    assert len(block) == 1
    exported = tmp_path / "logs" / "tutorial" / "my_crate.safetensors"
    exported.parent.mkdir(parents=True)
    shutil.copy(REPO / "checkpoints" / "crate_nano_patch4_32.digits.safetensors", exported)
    monkeypatch.chdir(tmp_path)
    exec(compile(block[0], "tutorial.md", "exec"), {})
    label, probability = capsys.readouterr().out.split()
    assert label == "0" and 0.5 < float(probability) <= 1.0


def test_the_shipped_tags_table_is_the_results_csvs() -> None:
    """Independent of the generator: every row of results/*.csv is one row of the README's table, with its val
    top-1 (and its test top-1 where results/*-test.csv scored it) to two decimals, the CIFAR-10 rows sorted by
    test top-1, and the table holds nothing else."""
    text = README.read_text()
    block = text.split("<!-- table:shipped-tags -->")[1].split("<!-- /table:shipped-tags -->")[0]
    rows = [line for line in block.strip().splitlines()[2:]]
    val, test = {}, {}
    for path in (REPO / "results").glob("results-*.csv"):
        with path.open(newline="") as handle:
            scored = {row["model"]: float(row["top1"]) for row in csv.DictReader(handle)}
        (test if path.stem.endswith("-test") else val).update(scored)
    assert len(rows) == len(val) > 10
    shown_tests = []
    for line in rows:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        tag = cells[0].strip("`")
        assert float(cells[4]) == pytest.approx(val[tag], abs=0.005), tag
        if tag in test:
            assert float(cells[5]) == pytest.approx(test[tag], abs=0.005), tag
            shown_tests.append(float(cells[5]))
        else:
            assert cells[5] == "-", tag
        assert (REPO / "checkpoints" / f"{tag}.md").is_file()
    assert shown_tests == sorted(shown_tests, reverse=True)


def test_every_generated_table_is_what_its_command_writes() -> None:
    assert docs_tables.main(["--check"]) == 0


def test_the_check_names_a_stale_table_and_writes_nothing(tmp_path: Path, monkeypatch, capsys) -> None:
    stale = tmp_path / "table.md"
    stale.write_text("old\n")
    monkeypatch.setattr(docs_tables, "REPO", tmp_path)
    monkeypatch.setattr(docs_tables, "rendered", lambda: {stale: lambda: "new\n"})
    assert docs_tables.main(["--check"]) == 1
    assert "table.md" in capsys.readouterr().err and stale.read_text() == "old\n"
    assert docs_tables.main([]) == 0 and stale.read_text() == "new\n"


def test_a_file_without_its_table_block_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no <!-- table:shipped-tags -->"):
        docs_tables._replace_block("no markers here", "shipped-tags", "| x |", tmp_path / "README.md")


def test_the_docs_site_builds_strictly_with_no_warning(tmp_path: Path) -> None:
    """mkdocs --strict: a broken link, a page outside the navigation or a docstring griffe cannot read fails."""
    mkdocs = Path(sys.executable).parent / "mkdocs"
    result = subprocess.run(
        [str(mkdocs), "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "WARNING" not in result.stderr, result.stderr[-3000:]
    assert (tmp_path / "site" / "api" / "index.html").is_file()
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    assert "compression_responses" in api
    assert re.search(r"CRATE\(\s*img_size: int", re.sub(r"<[^>]+>", "", api))  # constructors show their signature
    for page in sorted((tmp_path / "site").rglob("*.html")):
        rendered = _RenderedText()
        rendered.feed(page.read_text())
        assert not rendered.run_on_lists, f"{page}: a list rendered as running text: {rendered.run_on_lists[0]!r}"
        broken = [rows for rows in rendered.tables if len(set(rows)) > 1]
        assert not broken, f"{page}: a table whose rows have different numbers of cells: {broken[0]}"


class _RenderedText(HTMLParser):
    """What a reader sees of a built page: paragraphs whose text holds a "- item" line (a markdown list that
    lost its blank line above), and each table's number of cells per row."""

    def __init__(self) -> None:
        super().__init__()
        self.paragraph: str | None = None
        self.run_on_lists: list[str] = []
        self.tables: list[list[int]] = []
        self.cells = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "p":
            self.paragraph = ""
        elif tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.cells = 0
        elif tag in ("td", "th"):
            self.cells += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "p" and self.paragraph is not None:
            if re.search(r"\n\s*[-*] \S", self.paragraph):
                self.run_on_lists.append(self.paragraph[:120])
            self.paragraph = None
        elif tag == "tr" and self.tables:
            self.tables[-1].append(self.cells)

    def handle_data(self, data: str) -> None:
        if self.paragraph is not None:
            self.paragraph += data


def test_every_relative_link_and_picture_of_the_readme_exists() -> None:
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text())
    local = [t for t in targets if not t.startswith(("http://", "https://"))]
    assert len(local) >= 10
    missing = [t for t in local if not (REPO / t).exists() and "checkpoints/" not in t]
    assert not missing, missing
    cards = [t for t in local if t.startswith("checkpoints/")]
    assert cards and all((REPO / t).is_file() for t in cards), cards


def test_the_readme_s_loading_example_runs_as_written_and_each_tag_names_its_classes() -> None:
    """The README's python block, run line for line with a real image in ``image`` (the CRATE-alpha line, which
    downloads the authors' file, is the one left out: tests make no network calls); then the README's
    ``label_names`` line on the digits tag it shows next."""
    from PIL import Image

    block = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    code = "\n".join(line for line in block.splitlines() if "crate_alpha_base_patch16_224" not in line)
    scope = {"image": Image.new("RGB", (40, 30), (200, 30, 30))}
    exec(compile(code, "README.md", "exec"), scope)  # noqa: S102 - the README's own example
    probabilities = scope["probabilities"]
    assert probabilities.shape == (1, 10) and abs(float(probabilities.sum()) - 1.0) < 1e-5
    assert scope["labels"][0] == "airplane" and len(scope["labels"]) == 10
    assert scope["digits"].pretrained_cfg["label_names"] == tuple(str(d) for d in range(10))


def test_the_docs_home_page_example_runs_as_written_and_prints_a_class_name(capsys) -> None:
    """The home page's python block, run as written (its image is a white square): it prints one of the shipped
    CIFAR-10 CRATE's class names."""
    block = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "index.md").read_text(), re.S)
    assert len(block) == 1
    exec(compile(block[0], "index.md", "exec"), {})  # noqa: S102 - the page's own example
    import timm

    names = timm.create_model("crate_cct4_3x2_32.cifar10", pretrained=True).pretrained_cfg["label_names"]
    assert capsys.readouterr().out.strip() in names


def _reader_names(page: str) -> dict:
    """What a page's example leaves to its reader (images, a model), made here; the rest runs as written."""
    import timm
    import torch
    from PIL import Image

    if page == "models":
        return {"images": torch.randn(2, 3, 224, 224)}
    if page == "metrics":
        return {
            "model": timm.create_model("crate_nano_patch4_32.digits", pretrained=True),
            "images": torch.randn(2, 1, 32, 32),
        }
    return {"image": Image.new("RGB", (40, 30), (30, 120, 200))}


@pytest.mark.parametrize("page", ["models", "metrics", "self_supervised"])
def test_the_python_examples_of_the_reference_pages_run_as_written(page: str) -> None:
    """Each page's python block (offline; the images and model it names but does not make given here), with the
    shapes and figures its comments promise."""
    import torch

    blocks = re.findall(r"```python\n(.*?)```", (REPO / "docs" / f"{page}.md").read_text(), re.S)
    scope = _reader_names(page)
    for block in blocks:
        exec(compile(block, f"{page}.md", "exec"), scope)  # noqa: S102 - the page's own example
    if page == "models":
        assert scope["logits"].shape == (2, 10) and scope["tokens"].shape[:2] == (2, 1 + 14 * 14)
        assert len(scope["per_layer"]) == len(scope["model"].blocks)
    elif page == "metrics":
        from test_trace import official_coding_rate

        assert scope["traces"][0].attention.shape[:1] == (2,)
        model, outputs = scope["model"], []  # the official measurement: a hook on layer 0's qkv, as crate_hook.py
        heads = model.blocks[0].attn.num_heads
        hook = model.blocks[0].attn.qkv.register_forward_hook(
            lambda module, args, out: outputs.append(out.detach().double().numpy())
        )
        with torch.no_grad():
            model(scope["images"])
        hook.remove()
        batch, tokens, _ = outputs[0].shape
        expected = official_coding_rate(outputs[0].reshape(batch, tokens, heads, -1).transpose(0, 2, 1, 3))
        value = scope["metric"].compute()["Rc_before_attention/layer_0"]
        assert value.dtype == torch.float64 and float(value) == pytest.approx(expected, rel=1e-6)
        assert any(type(callback).__name__ == "CodingRateMonitor" for callback in scope["trainer"].callbacks)
    else:
        assert scope["features"].shape == (1, scope["encoder"].num_features)
