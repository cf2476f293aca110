"""SAELens's side of bench_sae_libraries.py: a TopK SAE trained by SAELens's own ``SAETrainer`` on a ``dstg-export``
folder, run with SAELens's python (its own environment: SAELens 6 needs transformer-lens < 4, we need >= 4.3).

    /work/venv-saelens/bin/python benchmarks/sae_lens_runner.py EXPORT COLUMN SPLIT.npz --d-sae 256 --k 4 --steps 1000

Interop through data only: nothing of dstg_interp is imported.  The export is opened with ``datasets.load_from_disk``;
SPLIT.npz holds the training and held-out row numbers (bench_sae_libraries.py draws them, the same for both
libraries).  SAELens's ``LanguageModelSAETrainingRunner`` cannot be used: it always loads a TransformerLens model
(``load_model``, or ``override_model``: a ``HookedRootModule``, which ours is only in transformer-lens 4), and its
cached-activation reader wants one row per fixed-length context (``Array2D(context_size, d_in)`` under the hook's
name), not the export's one row per token.  ``SAETrainer`` takes any iterator of [batch, d_in] tensors instead.
Prints one JSON line: import and training seconds, held-out FVU, versions.
"""

from __future__ import annotations

import argparse
import json
import time

started = time.perf_counter()
import datasets  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import sae_lens  # noqa: E402
from sae_lens import SAETrainer, TopKTrainingSAE, TopKTrainingSAEConfig  # noqa: E402
from sae_lens.config import SAETrainerConfig  # noqa: E402

import_s = time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("export")
    parser.add_argument("column")
    parser.add_argument("split")
    parser.add_argument("--d-sae", type=int, default=256)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    split = np.load(args.split)
    table = datasets.load_from_disk(args.export).with_format("numpy")
    states = np.asarray(table[args.column], dtype=np.float32)
    train, test = states[split["train"]], states[split["test"]]
    x_train = torch.from_numpy(train)
    generator = torch.Generator().manual_seed(args.seed)

    def batches():
        while True:
            yield x_train[torch.randint(len(x_train), (args.batch_size,), generator=generator)]

    lr = args.lr if args.lr is not None else 2e-4 / (args.d_sae / 2**14) ** 0.5  # the rule sparsify uses, for parity
    sae = TopKTrainingSAE(TopKTrainingSAEConfig(d_in=train.shape[1], d_sae=args.d_sae, k=args.k, dtype="float32",
                                                device="cpu", normalize_activations="expected_average_only_in"))
    trainer = SAETrainer(SAETrainerConfig(total_training_samples=args.steps * args.batch_size,
                                          train_batch_size_samples=args.batch_size, lr=lr, lr_end=lr, device="cpu",
                                          n_batches_for_norm_estimate=20),
                         sae=sae, data_provider=batches())
    fit_started, fit_cpu = time.perf_counter(), time.process_time()
    sae = trainer.fit()
    train_s, train_cpu_s = time.perf_counter() - fit_started, time.process_time() - fit_cpu
    with torch.no_grad():
        reconstruction = sae(torch.from_numpy(test)).numpy().astype(np.float64)
    fvu = float(((test - reconstruction) ** 2).sum() / ((test - test.mean(0)) ** 2).sum())
    print(json.dumps({"library": "sae-lens", "version": sae_lens.__version__, "torch": torch.__version__,
                      "import_s": round(import_s, 2), "train_s": round(train_s, 2), "train_cpu_s": round(train_cpu_s, 2),
                      "steps_per_s": round(args.steps / train_s, 1), "fvu": round(fvu, 4)}))


if __name__ == "__main__":
    main()
