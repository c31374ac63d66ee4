"""The reference the server is checked against: `pagoda run --temperature 0`."""
import json
import subprocess

from server_util import PAGODA


def run_greedy(model, prompt, n, chat=False, ignore_eos=None):
    args = [str(PAGODA), "run", "-m", str(model), "-p", prompt, "-n", str(n), "--temperature",
            "0", "--threads", "2", "--json"]
    if chat:
        args.append("--chat")
    if ignore_eos if ignore_eos is not None else not chat:
        args.append("--ignore-eos")
    out = subprocess.run(args, capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout)
