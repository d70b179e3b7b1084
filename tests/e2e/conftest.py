import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="session")
def rt(runtime_build):
    from aotpack import runtime

    return runtime
