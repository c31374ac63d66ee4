import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from server_util import MODEL_NAME, ServerProcess  # noqa: E402


@pytest.fixture(scope="session")
def server():
    s = ServerProcess()
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="session")
def client(server):
    import openai
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0,
                         timeout=120)


@pytest.fixture(scope="session")
def model():
    return MODEL_NAME
