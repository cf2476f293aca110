"""Executable documentation: every fenced Python and shell example of README.md and the docs pages it links
runs as written, offline, in a sandbox folder (``tests/readme_examples.py`` extracts them).

What makes them fast and offline, and nothing else:
- each document runs in its own fresh working folder, holding what the examples name: ``docs.jsonl`` (synthetic
  documents), ``path/to/all-MiniLM-L6-v2`` (a tiny random BERT folder in the Hub's layout), ``path/to/bert-base-uncased``
  (the same, saved with its masked-LM head), ``models/`` (the authors' formats and a DSTG checkpoint folder,
  ``tests/your_models.py``), ``PATH`` (a
  Holmes-format benchmark: the test fixtures), ``figures/`` (the committed gallery's tables), and a HOME
  whose cache holds that benchmark as ``~/.cache/dstg-interp/holmes-suite/v1``;
- the registry corpora (en-mix, pydocs) are replaced by 300 synthetic documents (``tiny_documents``);
- one BLAS thread (threadpoolctl): on a loaded 2-core machine OpenBLAS threads made the probes' eigh 8x slower;
- shell commands run in-process (a ``/tmp/...`` path lands in the sandbox) (``dstg_interp.cli.entry.launch``, ``python -m`` through runpy) with the
  flags of ``SHRINK`` appended, which cut a run to a few steps or documents (a flag given twice: the last
  wins, so the example's own flags are still parsed and checked);
- Python blocks of one document share one namespace (a reader's session), seeded with the names the
  README uses without defining: ``torch``, ``np``, ``pd``, ``model`` (the zoo's DSTG), ``tokens``,
  ``attention_mask``, ``labels``, ``documents``, ``token_id_lists``, ``sequences``, ``invariance``.
Examples the test cannot run are marked in the document (``# not run offline: why`` / ``# not run in tests: why``)
and reported as skips with that reason.
"""

from __future__ import annotations

import json
import linecache
import runpy
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from threadpoolctl import threadpool_limits

import readme_examples
from dstg_interp import load_model, open_encoder
from dstg_interp.data import catalog
from dstg_interp.cli import COMMANDS
from dstg_interp.cli.entry import launch
from dstg_interp.tiny_zoo import tiny_documents
from experiments import figures
from hf_writers import write_tiny_bert
from your_models import write_your_models

torch.set_num_threads(1)
EXAMPLES = readme_examples.collect()
SHRINK = {  # appended to the example's own flags: the same code path on a toy budget
    "dstg-train": ["--steps", "2", "--max-docs", "120", "--max-length", "32", "--vocab-size", "400", "--batch-size", "4",
                   "--d-model", "32", "--n-layers", "1", "--n-heads", "2", "--eval-every", "1", "--save-every", "1",
                   "--threads", "1", "--quiet", "--no-compile"],
    "dstg-eval": ["--n-docs", "4"],
    "dstg-cache": ["--max-docs", "8", "--max-length", "64", "--quiet"],
    "dstg-probe": ["--max-docs", "14", "--quiet"],
    "dstg-holmes": ["--quiet"],
    "experiments.recipe_study": ["--tiny", "--steps", "4"],
    "experiments.fig_probes": ["--tiny", "--quiet", "--model-seeds", "0"],
    "experiments.sae_streams": ["--quiet", "--steps", "20", "--ks", "1", "2", "--dict-sizes", "8", "16", "--dict-size", "16",
                                "--ref-k", "2", "--no-controls"],
    # docs/your-models.md: each figure on the synthetic corpus, its study cut to a few documents
    "dstg-figures probes": ["--tiny", "--quiet", "--n-boot", "10", "--max-tokens", "1500"],
    "dstg-figures ap-manifold": ["--tiny", "--quiet", "--control-draws", "2", "--projections", "2"],
    "dstg-figures heads": ["--tiny", "--quiet"],
    "dstg-figures erasure": ["--tiny", "--quiet"],
    "dstg-figures interventions": ["--tiny", "--quiet", "--n-sequences", "4"],
    "dstg-figures extrapolation": ["--tiny", "--quiet", "--max-windows", "16", "--n-draws", "1", "--max-tokens", "1500"],
    "dstg-figures invariance": ["--tiny", "--quiet"],
    "dstg-figures patching": ["--tiny", "--quiet", "--n-sequences", "4"],
    "dstg-figures logit-lens": ["--tiny", "--quiet", "--n-sequences", "4"],
    "dstg-figures rope-bands": ["--tiny", "--quiet", "--n-sequences", "4"],
    "dstg-figures decomposition": ["--tiny", "--quiet", "--n-sequences", "8"],
}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    root = tmp_path_factory.mktemp("readme")
    synthetic = tiny_documents(n_docs=300, seed=0)
    with (root / "docs.jsonl").open("w") as handle:
        for document in synthetic[:40]:
            handle.write(json.dumps({"id": document.doc_id, "text": document.text}) + "\n")
    (root / "path" / "to").mkdir(parents=True)
    write_tiny_bert(root / "path" / "to" / "all-MiniLM-L6-v2", synthetic[:20])
    write_tiny_bert(root / "path" / "to" / "bert-base-uncased", synthetic[:20], mlm_head=True)  # a masked-LM
    write_your_models(root / "models")  # docs/your-models.md: the authors' formats, each with a tokenizer
    benchmark = readme_examples.ROOT / "tests" / "fixtures" / "holmes" / "benchmark"
    for target in (root / "PATH", root / "home" / ".cache" / "dstg-interp" / "holmes-suite" / "v1"):
        for dataset in benchmark.glob("fx-*"):
            shutil.copytree(dataset, target / dataset.name)
    shutil.copytree(readme_examples.ROOT / "figures", root / "figures", ignore=shutil.ignore_patterns("*.png", "*.pdf"))
    with pytest.MonkeyPatch.context() as patch, threadpool_limits(limits=1):  # BLAS threads spin on a shared box
        patch.chdir(root)
        patch.setenv("HOME", str(root / "home"))
        patch.delenv("DSTG_CACHE", raising=False)
        patch.setattr(catalog, "load_en_mix", lambda *args, **kwargs: list(synthetic))
        patch.setattr(catalog, "load_pydocs", lambda *args, **kwargs: list(synthetic[:60]))
        yield root, {}


def python_namespace(root) -> dict:
    encoder = open_encoder("dstg")
    documents = tiny_documents(n_docs=12, seed=1)
    sequences = encoder.structured_sequences(documents, max_length=48)
    token_id_lists = [list(map(int, sequences[i]["input_ids"])) for i in range(4)]
    tokens, attention_mask = encoder.pad(token_id_lists)
    labels = torch.where(torch.rand(tokens.shape, generator=torch.Generator().manual_seed(0)) < 0.2, tokens, -100)
    return {"torch": torch, "np": np, "pd": pd, "model": load_model("dstg"), "tokens": tokens,
            "attention_mask": attention_mask, "labels": labels.masked_fill(~attention_mask, -100),
            "documents": documents, "token_id_lists": token_id_lists, "sequences": sequences,
            "invariance": pd.read_csv(root / "figures" / "invariance" / "invariance.csv")}


def run_shell(argv: list[str], root) -> int:
    argv = [str(root / arg[1:]) if arg.startswith("/tmp/") else arg for arg in argv]  # /tmp/x -> the sandbox's
    if argv[0] in COMMANDS:
        return launch(argv[0], argv[1:] + SHRINK.get(argv[0], []))
    if argv[0] == "dstg-figures":  # experiments.figures, the figure scripts' command
        return figures.main(argv[1:] + SHRINK.get(" ".join(argv[:2]), []))
    if argv[:2] == ["python", "-m"] and len(argv) > 2:
        module = argv[2]
        old = sys.argv
        sys.argv = [module, *argv[3:], *SHRINK.get(module, [])]
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as exit:
            return int(exit.code or 0) if not isinstance(exit.code, str) else 2
        finally:
            sys.argv = old
        return 0
    raise AssertionError(f"{argv[0]!r} is not a command this runner knows; mark the line '# not run offline: why'")


FIXTURES = ("docs.jsonl", "path", "PATH", "figures", "models")


def page_folder(root, page):
    """Each document runs in its own folder (a reader follows one page at a time), holding the fixtures."""
    folder = root / "pages" / page.stem
    if not folder.is_dir():
        folder.mkdir(parents=True)
        for name in FIXTURES:
            (folder / name).symlink_to(root / name)
    return folder


# The examples a document marks as not runnable here (`# not run offline: why`) are not collected: the reader
# sees the reason beside the example, and test_every_example_is_run_or_marked_with_a_reason checks it is there.
RUNNABLE = [e for e in EXAMPLES if e.skip is None]


@pytest.mark.parametrize("example", RUNNABLE, ids=[e.where for e in RUNNABLE])
def test_example_runs_as_written(example, sandbox, capsys, monkeypatch):
    root, namespaces = sandbox
    monkeypatch.chdir(page_folder(root, example.path))
    if example.kind == "python":
        namespace = namespaces.setdefault(example.path, python_namespace(root))
        # the block's source where a traceback -- and nnsight, which compiles a trace's body from its source --
        # looks it up, as IPython registers a notebook cell
        linecache.cache[example.where] = (len(example.code), None, example.code.splitlines(True), example.where)
        exec(compile(example.code, example.where, "exec"), namespace)
        return
    rc = run_shell(readme_examples.argv_of(example.code), root)
    err = capsys.readouterr().err
    assert rc == 0, f"{example.where}: `{example.code}` exited {rc}:\n{err[-2000:]}"
    assert "Traceback" not in err, err[-2000:]


def test_every_example_is_run_or_marked_with_a_reason():
    """At least the main job's examples run; every skip carries its marker's reason."""
    assert EXAMPLES and all(e.skip is None or e.skip.strip() for e in EXAMPLES)
    assert any("probe_positions" in e.code for e in RUNNABLE) and any(e.code.startswith("dstg-probe") for e in RUNNABLE)
    with pytest.raises(ValueError, match="needs its reason"):
        readme_examples.marker_reason("hf download x   # not run offline:  ")


def test_the_main_job_in_a_clean_clone_leaves_git_status_clean(sandbox, tmp_path, monkeypatch):
    """README command 1 (`dstg-probe --task segment`, on the sandbox's synthetic en-mix) at the root of a fresh
    clone writes its tables under dstg-results/, which the clone's .gitignore lists: git status stays clean."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(readme_examples.ROOT), str(clone)], check=True)
    monkeypatch.chdir(clone)
    assert launch("dstg-probe", ["--task", "segment", *SHRINK["dstg-probe"]]) == 0
    assert (clone / "dstg-results" / "segment" / "results.csv").is_file()
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=clone, check=True,
                            capture_output=True, text=True).stdout
    assert status == "", status
