import pytest

import minidynamo
from minidynamo import _C


@pytest.fixture(autouse=True)
def _fresh_caches():
    minidynamo.reset()
    yield
    assert _C.get_eval_frame() is None, "a test left an eval-frame callback set"
    minidynamo.reset()
