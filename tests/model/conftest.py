import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("PAGODA_SHARED_DIR", ROOT.parent / "shared"))
TOKENIZER_DATA = SHARED / "testdata" / "tokenizer"
PAGODA = Path(os.environ.get("PAGODA_BIN", ROOT / "build" / "pagoda"))
SMOLLM2 = Path(os.environ.get("PAGODA_SMOLLM2",
                              ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
VOCAB_NAMES = ["llama-bpe", "qwen2", "gpt-2", "llama-spm", "phi-3", "deepseek-coder"]

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="session")
def pagoda_bin():
    return PAGODA


@pytest.fixture(scope="session", autouse=True)
def _binary_exists():
    # A missing binary or model is a failure, not a skip: CI must not pass by skipping.
    if not PAGODA.exists():
        pytest.fail(f"{PAGODA} is missing: run scripts/setup.sh (or build with cmake)")


@pytest.fixture(scope="module", autouse=True)
def _release_references():
    # pagoda_util.Reference holds the last reference model it built (0.6 GB) and its
    # answers: not past the module whose tests asked for them.
    yield
    import pagoda_util
    pagoda_util.release_references()


@pytest.fixture(scope="session")
def awq_gptq_folders(tmp_path_factory):
    """A function from variant names to scripts/hf_awq_gptq.py's round-to-nearest AWQ and
    GPTQ folders of the SmolLM2 folder ({variant: path}), each written once a session:
    test_awq_gptq reads all nine, test_awq_quantize weighs its searched AWQ folder
    against awq_g64."""
    out = tmp_path_factory.mktemp("awq_gptq")

    def folders(*variants):
        missing = [v for v in variants if not (out / v).is_dir()]
        if missing:  # one run for all of them: the script's start (torch) costs seconds
            subprocess.run([sys.executable, str(ROOT / "scripts" / "hf_awq_gptq.py"),
                            str(ROOT / "models" / "SmolLM2-135M-Instruct-hf"), str(out),
                            *missing], check=True, capture_output=True, text=True)
        return {v: str(out / v) for v in variants}
    return folders
