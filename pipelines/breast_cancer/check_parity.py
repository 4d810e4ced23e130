"""Parity check: samples -> preprocess -> onnxruntime(build()) -> postprocess vs sklearn.

Run from the checkout root: ``python -m pipelines.breast_cancer.check_parity``. Exits non-zero
on a mismatch (probabilities beyond 1e-5 or labels different) at batch 1 or batch N.
"""

import sys

import numpy as np
import onnx
import onnxruntime as ort
from sklearn.metrics import accuracy_score, roc_auc_score

from pipelines.breast_cancer.model import build, fit, split
from pipelines.breast_cancer.samples import samples
from pipelines.breast_cancer.steps import CLASSES, postprocess, preprocess

TOL = 1e-5


def _dtype(t: onnx.TypeProto) -> str:
    tt = t.tensor_type
    dims = [d.dim_param or d.dim_value or "?" for d in tt.shape.dim]  # ? = dynamic
    return f"{onnx.TensorProto.DataType.Name(tt.elem_type)} {dims}"


def main() -> int:
    """Print the graph signature, the parity figures and the held-out metrics; 0 if parity holds."""
    model = build()
    onnx.checker.check_model(model)
    g = model.graph
    print("opset:", {o.domain or "ai.onnx": o.version for o in model.opset_import})
    for kind, vals in (("input", g.input), ("output", g.output)):
        for v in vals:
            print(f"graph {kind}: {v.name}: {_dtype(v.type)}")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    out_names = [o.name for o in sess.get_outputs()]
    clf = fit()

    def served(x: np.ndarray) -> dict[str, np.ndarray]:
        pre = preprocess({"MEASUREMENTS": x})
        return postprocess(dict(zip(out_names, sess.run(None, pre), strict=True)))

    x = samples()["MEASUREMENTS"]
    feats = preprocess({"MEASUREMENTS": x})["features"]
    ref_p = clf.predict_proba(feats)[:, 0]
    ref_l = CLASSES[clf.predict(feats)]
    ok = True
    for name, batches in (("batch 1", [x[i : i + 1] for i in range(len(x))]), ("batch N", [x])):
        res = [served(b) for b in batches]
        p = np.concatenate([r["PROBABILITY_MALIGNANT"] for r in res]).reshape(-1)
        lab = np.concatenate([r["DIAGNOSIS"] for r in res]).reshape(-1)
        diff = float(np.abs(p - ref_p).max())
        same = bool((lab == ref_l).all())
        ok &= diff <= TOL and same
        print(f"{name} (rows={len(x)}): max |dP| = {diff:.2e} (tol {TOL}), labels equal: {same}")
        assert (
            res[0]["DIAGNOSIS"].dtype == object
            and res[0]["PROBABILITY_MALIGNANT"].dtype == np.float32
        )

    _, x_test, _, y_test = split()
    r = served(x_test)
    p_mal = r["PROBABILITY_MALIGNANT"].reshape(-1)
    y_hat = (r["DIAGNOSIS"].reshape(-1) == b"benign").astype(int)
    sk = clf.predict(preprocess({"MEASUREMENTS": x_test})["features"])
    acc, auc = accuracy_score(y_test, y_hat), roc_auc_score(y_test == 0, p_mal)
    print(f"held-out (n={len(y_test)}): served accuracy {acc:.4f}, AUC {auc:.4f}; ", end="")
    print(f"sklearn accuracy {accuracy_score(y_test, sk):.4f}")

    for bad, want in ((np.nan, "not in [0,"), (-1.0, "not in [0,"), (3e38, "not in [0,")):
        y = x[:3].copy()
        y[2, 7] = bad
        try:
            preprocess({"MEASUREMENTS": y})
            ok = False
            print("bad value accepted!")
        except ValueError as e:
            print(f"ValueError for {bad}: {e}")
            ok &= "row 2 column 7" in str(e) and want in str(e)
    print("PARITY OK" if ok else "PARITY FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
