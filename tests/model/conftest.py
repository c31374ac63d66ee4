import os
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
