"""One source of truth: the resident memory of `pagoda serve`, once it has loaded the
model, allocated its KV pool and run a batch at its limits, is what `pagoda plan` predicts
for the same flags (within 5% or 20 MB, the issue's bound)."""
import json
import subprocess
import threading

from server_util import PAGODA, SMOLLM2, ServerProcess

FLAGS = ["--max-num-seqs", "8", "--max-num-batched-tokens", "512"]


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_serve_rss_matches_the_plan():
    plan = json.loads(subprocess.run(
        [str(PAGODA), "plan", str(SMOLLM2), "--device", "cpu", "--kv-cache-memory", "256MiB",
         "--context", "2048", "--json", *FLAGS], capture_output=True, text=True, check=True).stdout)
    predicted = (plan["weight_bytes"] + plan["overheads"]["total_bytes"]
                 + plan["kv_pool_blocks"] * plan["block_size"] * plan["kv_bytes_per_token"])
    server = ServerProcess(*FLAGS)
    try:
        # Fill the batch limits once: 8 sequences decoding together (logits rows) after
        # prompts longer than the 512-token step budget (activation buffers).
        prompt = "All the world's a stage, and all the men and women merely players. " * 40

        def one():
            status, _, body = server.request("POST", "/v1/completions", {
                "model": "smollm2", "prompt": prompt, "max_tokens": 8, "temperature": 0})
            assert status == 200, body

        threads = [threading.Thread(target=one) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        measured = rss_bytes(server.proc.pid)
        # The CUDA backend is a plugin: a CPU server must not have loaded it (or cuBLASLt,
        # ~180 MB of resident memory on its own).
        maps = open(f"/proc/{server.proc.pid}/maps").read()
        assert "libpagoda_cuda" not in maps and "libcublas" not in maps
    finally:
        assert server.stop() == 0
    diff = measured - predicted
    print(f"RSS {measured / 1e6:.1f} MB, plan {predicted / 1e6:.1f} MB ({diff / 1e6:+.1f} MB)")
    assert abs(diff) <= max(0.05 * predicted, 20e6), (
        f"RSS {measured / 1e6:.1f} MB, plan {predicted / 1e6:.1f} MB ({diff / 1e6:+.1f} MB)")
