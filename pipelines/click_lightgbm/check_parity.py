"""Parity check: samples -> preprocess -> onnxruntime(build()) -> postprocess vs LightGBM.

Run from the checkout root: ``python -m pipelines.click_lightgbm.check_parity``. Exits non-zero
when a click probability differs from ``LGBMClassifier.predict_proba`` by more than ``TOL``, at
batch 1 (the samples) or batch N (the whole held-out draw), or a bad value is accepted.
"""

import sys

import numpy as np
import onnxruntime as ort
from sklearn.metrics import roc_auc_score

from pipelines.click_lightgbm.model import build, fit, split
from pipelines.click_lightgbm.samples import samples
from pipelines.click_lightgbm.steps import postprocess, preprocess

# ONNX Runtime's TreeEnsembleClassifier sums the leaves in FP32 and compares FP32 features with
# thresholds stored as FP32; LightGBM works in FP64. Measured max |dP| on the held-out draw:
# 1.9e-7.
TOL = 1e-5


def reference(x: np.ndarray) -> np.ndarray:
    """LightGBM's click probability FP64 ``[n]`` of FEATURES ``x`` FP32 ``[n, 10]``."""
    return fit().predict_proba(preprocess({"FEATURES": x})["features"])[:, 1]


def main() -> int:
    """Print the parity figures and the held-out AUC; 0 if parity holds."""
    sess = ort.InferenceSession(build().SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]

    def served(x: np.ndarray) -> np.ndarray:
        pre = preprocess({"FEATURES": x})
        out = postprocess(dict(zip(names, sess.run(None, pre), strict=True)))
        return out["CLICK_PROBABILITY"].reshape(-1)

    x = samples()["FEATURES"]
    _, x_test, _, y_test = split()
    ok = True
    for what, rows, batches in (
        ("samples, batch 1", x, [x[i : i + 1] for i in range(len(x))]),
        ("held-out, batch N", x_test, [x_test]),
    ):
        p = np.concatenate([served(b) for b in batches])
        diff = float(np.abs(p - reference(rows)).max())
        ok &= diff <= TOL
        print(f"{what} (rows={len(rows)}): max |dP| = {diff:.2e} (tol {TOL})")
    auc = roc_auc_score(y_test, served(x_test))
    print(f"held-out (n={len(y_test)}, {y_test.mean():.1%} clicked): served AUC {auc:.4f}")
    bad = x[:3].copy()
    bad[2, 0] = 0.0  # position 0: below its range
    try:
        preprocess({"FEATURES": bad})
        ok = False
        print("bad value accepted!")
    except ValueError as e:
        print(f"ValueError: {e}")
        ok &= "row 2 column 0 (position)" in str(e)
    print("PARITY OK" if ok else "PARITY FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
