"""First CUDA figures: tg128 and pp512 of synthetic F16 models of real shapes, each next to
its roofline. Runs on the GPU machine:

    python3 bench/cuda_first_figures.py --stride build-gpu/stride --out DIR

Rooflines (both ceilings measured in the same run with PyTorch when it is there):
  decode : weight bytes read per token / device copy bandwidth (read + write counted);
           the bytes are every tensor except the token embedding, which decode reads one
           row of, unless the output head is tied to it (then the head reads all of it).
  prefill: 2 * (GEMM weight elements) * tokens FLOPs / measured cuBLAS F16 rate, plus the
           attention FLOPs (4 * n_layer * n_ctx^2/2 * n_head * head_dim for a causal pp).
Each configuration runs REPS times in fresh processes (CUDA_MODULE_LOADING=EAGER so
that module loading stays out of the timed prompt); the median is reported with min..max.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

PRESETS = ["llama-3.2-1b", "qwen3-1.7b", "qwen3-8b"]
PROMPT = re.compile(r"prompt\s+[\d.]+ s\s+(\d+) tokens\s+([\d.]+) tok/s")
GEN = re.compile(r"generation\s+[\d.]+ s\s+(\d+) tokens\s+([\d.]+) tok/s")


def measure_ceilings():
    try:
        import torch
    except ImportError:
        return None, None
    dev = torch.device("cuda")
    n = 1 << 30  # 1 GiB of f32 each way
    a = torch.empty(n // 4, dtype=torch.float32, device=dev).uniform_()
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(20):
        b.copy_(a)
    e.record()
    torch.cuda.synchronize()
    copy_bw = 2 * n * 20 / (s.elapsed_time(e) / 1e3)
    x = torch.randn(8192, 8192, dtype=torch.float16, device=dev)
    y = torch.randn(8192, 8192, dtype=torch.float16, device=dev)
    for _ in range(3):
        x @ y
    torch.cuda.synchronize()
    s.record()
    for _ in range(10):
        x @ y
    e.record()
    torch.cuda.synchronize()
    flops = 2 * 8192 ** 3 * 10 / (s.elapsed_time(e) / 1e3)
    return copy_bw, flops


def model_numbers(stride, path):
    doc = json.loads(subprocess.run([stride, "inspect", path, "--json", "--layout"], check=True,
                                    capture_output=True, text=True).stdout)
    md = {k: v["value"] for k, v in doc["metadata"].items()}
    arch = md["general.architecture"]
    tensors = {t["name"]: t for t in doc["tensors"]}
    tied = "output.weight" not in tensors
    total = sum(t["bytes"] for t in doc["tensors"])
    embd = tensors["token_embd.weight"]["bytes"]
    decode_bytes = total if tied else total - embd
    gemm_elems = 0
    for t in doc["tensors"]:
        if t["role"] in ("gemm", "router", "gemm-experts") or (tied and t["name"] == "token_embd.weight"):
            n = 1
            for d in t["ne"]:
                n *= d
            gemm_elems += n
    return {
        "arch": arch, "decode_bytes": decode_bytes, "gemm_elements": gemm_elems,
        "n_layer": md[f"{arch}.block_count"], "n_head": md[f"{arch}.attention.head_count"],
        "head_dim": md.get(f"{arch}.attention.key_length",
                           md[f"{arch}.embedding_length"] // md[f"{arch}.attention.head_count"]),
        "n_padded": doc["layout"]["n_padded"],
    }


def run_once(stride, path, n_prompt, n_gen, pad):
    prompt = ",".join(str(1 + (i * 7919) % 30000) for i in range(n_prompt))
    env = dict(os.environ, CUDA_MODULE_LOADING="EAGER")
    p = subprocess.run([stride, "run", "-m", path, "--backend", "cuda", "--tokens", prompt, "-n", str(n_gen),
                        "-c", str(n_prompt + n_gen + 16), "--pad-weights", pad],
                       capture_output=True, text=True, env=env)
    mp, mg = PROMPT.search(p.stderr), GEN.search(p.stderr)
    if p.returncode != 0 or not mp or not mg:
        raise RuntimeError(f"stride run failed ({p.returncode}): {p.stderr[-2000:]}")
    return float(mp.group(2)), float(mg.group(2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stride", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/stride-bench")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--presets", default=",".join(PRESETS))
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    copy_bw, gemm_rate = measure_ceilings()
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    rows = []
    for preset in a.presets.split(","):
        path = os.path.join(a.work, f"{preset}-f16.gguf")
        if not os.path.exists(path):
            subprocess.run([a.stride, "synth", preset, "-o", path, "--type", "f16"], check=True,
                           capture_output=True)
        nums = model_numbers(a.stride, path)
        pp, tg = [], []
        for _ in range(a.reps):
            p512, _ = run_once(a.stride, path, 512, 1, "auto")
            _, t128 = run_once(a.stride, path, 8, 128, "auto")
            pp.append(p512)
            tg.append(t128)
        bw = copy_bw or 4.3e12
        rate = gemm_rate or 7.9e14
        tg_roof = bw / nums["decode_bytes"]
        ctx = 512
        flops_pp = 2 * nums["gemm_elements"] * ctx + 4 * nums["n_layer"] * (ctx * ctx / 2) * nums["n_head"] * nums["head_dim"]
        pp_roof = ctx / (flops_pp / rate)
        row = {"model": f"{preset} f16", "pp512": statistics.median(pp), "pp512_all": pp,
               "pp512_roofline": pp_roof, "tg128": statistics.median(tg), "tg128_all": tg,
               "tg128_roofline": tg_roof, "decode_bytes": nums["decode_bytes"], "flops_pp512": flops_pp,
               "padded_tensors": nums["n_padded"]}
        rows.append(row)
        print(json.dumps(row), flush=True)
        os.remove(path)
    doc = {"device": gpu, "commit": commit, "date": time.strftime("%Y-%m-%d"), "copy_bandwidth_Bps": copy_bw,
           "cublas_f16_flops": gemm_rate, "reps": a.reps, "pad_weights": "auto", "rows": rows}
    with open(os.path.join(a.out, "cuda-first-figures.json"), "w") as f:
        json.dump(doc, f, indent=1)
    with open(os.path.join(a.out, "cuda-first-figures.md"), "w") as f:
        f.write(f"Device: {gpu}; commit {commit}; {doc['date']}; median of {a.reps} fresh processes "
                f"[min..max]; --pad-weights auto.\n")
        f.write(f"Ceilings measured in the same run: copy {copy_bw / 1e12:.2f} TB/s (read + write), "
                f"cuBLAS F16 8192^3 {gemm_rate / 1e12:.0f} TFLOP/s.\n\n")
        f.write("| model | tg128 tok/s | decode roofline | % | pp512 tok/s | prefill roofline | % |\n")
        f.write("|---|---|---|---|---|---|---|\n")
        for r in rows:
            f.write(f"| {r['model']} | {r['tg128']:.1f} [{min(r['tg128_all']):.1f}..{max(r['tg128_all']):.1f}] | "
                    f"{r['tg128_roofline']:.0f} | {100 * r['tg128'] / r['tg128_roofline']:.0f}% | "
                    f"{r['pp512']:.0f} [{min(r['pp512_all']):.0f}..{max(r['pp512_all']):.0f}] | "
                    f"{r['pp512_roofline']:.0f} | {100 * r['pp512'] / r['pp512_roofline']:.0f}% |\n")
    print(open(os.path.join(a.out, "cuda-first-figures.md")).read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
