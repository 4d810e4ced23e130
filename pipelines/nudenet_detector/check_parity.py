"""Parity check: samples -> preprocess -> ORT(build()) -> postprocess vs NudeDetector.detect.

Run from the checkout root: ``python -m pipelines.nudenet_detector.check_parity``.
Exits non-zero on any mismatch.
"""

import json
import sys
from pathlib import Path

import nudenet
import numpy as np
import onnx
import onnxruntime as ort
import tomllib
from nudenet import NudeDetector

from pipelines.nudenet_detector import model, samples, steps

HERE = Path(__file__).parent
TRITON_TO_NP = {"BYTES": np.object_, "INT32": np.int32, "FP32": np.float32}
failures: list[str] = []


def check(ok: bool, what: str) -> None:
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def describe(vi: onnx.ValueInfoProto) -> str:
    t = vi.type.tensor_type
    dims = [d.dim_param or d.dim_value for d in t.shape.dim]
    dims = [d if len(str(d)) < 20 else "<expr>" for d in dims]
    return f"{vi.name} {onnx.TensorProto.DataType.Name(t.elem_type)} {dims}"


def run_pipeline(sess: ort.InferenceSession, req: dict[str, np.ndarray]) -> dict:
    pre = steps.preprocess(req)
    (out0,) = sess.run(None, {"images": pre["images"]})
    return {"pre": pre, "output0": out0, **steps.postprocess({"output0": out0, **pre})}


def main() -> int:
    desc = tomllib.loads((HERE / "pipeline.toml").read_text())
    orig = onnx.load(Path(nudenet.__file__).with_name("320n.onnx"))
    built = model.build()
    for tag, m in (("original", orig), ("build()", built)):
        print(
            f"{tag}: opset {m.opset_import[0].version}; in: "
            + "; ".join(map(describe, m.graph.input))
            + "; out: "
            + "; ".join(map(describe, m.graph.output))
        )
    check(
        built.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch",
        "build(): batch dim is dynamic",
    )

    opts = ort.SessionOptions()
    sess = ort.InferenceSession(built.SerializeToString(), opts, ["CPUExecutionProvider"])
    sess_orig = ort.InferenceSession(orig.SerializeToString(), opts, ["CPUExecutionProvider"])
    detector = NudeDetector()

    req = samples.samples()
    images = req["IMAGE"]
    b = len(images)
    check(
        images.dtype == object and images.shape == (b, 1) and b >= 8,
        f"samples(): IMAGE object {images.shape}, {sum(len(x) for x in images[:, 0])} bytes",
    )

    res = run_pipeline(sess, req)
    # Declared shapes/dtypes.
    for spec in desc["preprocess"]["outputs"] + desc["output"]:
        arr = res["pre"].get(spec["name"], res.get(spec["name"]))
        check(
            arr.dtype == TRITON_TO_NP[spec["dtype"]] and arr.shape == (b, *spec["dims"]),
            f"{spec['name']}: {arr.dtype} {arr.shape} as declared",
        )
    check(
        res["pre"]["images"].dtype == np.float32 and res["pre"]["images"].shape == (b, 3, 320, 320),
        f"images: {res['pre']['images'].dtype} {res['pre']['images'].shape}",
    )
    check(res["output0"].shape == (b, 22, 2100), f"output0: {res['output0'].shape}")

    # Per image vs NudeDetector.detect(bytes).
    max_dscore, exact = 0.0, 0
    for i in range(b):
        ref = detector.detect(images[i, 0])
        got = json.loads(res["DETECTIONS"][i, 0])
        same = [d["class"] for d in got] == [d["class"] for d in ref] and [
            d["box"] for d in got
        ] == [d["box"] for d in ref]
        ds = max([abs(g["score"] - r["score"]) for g, r in zip(got, ref, strict=False)], default=0)
        max_dscore = max(max_dscore, ds)
        exact += got == ref
        check(
            same and ds <= 1e-4 and res["COUNT"][i, 0] == len(ref),
            f"IMAGE[{i}] LETTERBOX {res['pre']['LETTERBOX'][i].tolist()}: {len(got)} "
            f"detections {sorted({d['class'] for d in got})}, max |dscore| {ds:.2e}",
        )
    print(
        f"     max |dscore| over all images {max_dscore:.2e}; "
        f"{exact}/{b} JSON lists identical to NudeDetector.detect"
    )

    # Raw model: build() vs original, batch N vs batch 1.
    blobs = res["pre"]["images"]
    one = [sess.run(None, {"images": blobs[i : i + 1]})[0] for i in range(b)]
    one_orig = [sess_orig.run(None, {"images": blobs[i : i + 1]})[0] for i in range(b)]
    d_orig = max(float(np.abs(x - y).max()) for x, y in zip(one, one_orig, strict=True))
    check(
        d_orig <= 1e-4, f"raw output0, build() vs original 320n.onnx at batch 1: max {d_orig:.2e}"
    )
    for n in (8, b):
        (out,) = sess.run(None, {"images": blobs[:n]})
        d = float(np.abs(out - np.concatenate(one[:n])).max())
        check(d <= 1e-4, f"raw output0, batch {n} vs {n} batch-1 runs: max |d| {d:.2e}")

    # Pipeline: batch 1 vs batch N.
    rows = [run_pipeline(sess, {"IMAGE": images[i : i + 1]}) for i in range(b)]
    same = all(
        r["DETECTIONS"][0, 0] == res["DETECTIONS"][i, 0] and r["COUNT"][0, 0] == res["COUNT"][i, 0]
        for i, r in enumerate(rows)
    )
    check(same, f"pipeline DETECTIONS/COUNT, batch {b} vs {b} batch-1 runs: identical")

    # Bad requests.
    for bad, label in (
        (b"", "empty bytes"),
        (b"not an image", "text bytes"),
        (images[0, 0][:100], "truncated JPEG"),
        ("a str", "str"),
    ):
        batch = images[:3].copy()
        batch[2, 0] = bad
        try:
            steps.preprocess({"IMAGE": batch})
            check(False, f"bad IMAGE[2] ({label}) raises ValueError")
        except ValueError as e:
            check("IMAGE[2]" in str(e), f"bad IMAGE[2] ({label}): ValueError: {e}")
    return 1 if failures else 0


if __name__ == "__main__":
    rc = main()
    print("PASS" if rc == 0 else f"{len(failures)} FAILED")
    sys.exit(rc)
