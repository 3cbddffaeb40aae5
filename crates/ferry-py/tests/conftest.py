"""Every rank of `ferry run -n N python3 -m pytest -x ...` runs the same tests in the same
order (SPMD): the collectives inside them meet. Started without the launcher, the suite runs
as rank 0 of 1."""

import pytest

import ferry


@pytest.fixture(scope="session")
def comm():
    c = ferry.init()
    yield c
    c.finish()
