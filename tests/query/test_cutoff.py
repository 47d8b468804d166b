"""The relative cut-off of a search (``min_relative_score``), on a real index of the demo videos:
the weak tail of look-alikes is dropped by default, a request's 0 keeps it, and the pages of
one search agree on what is cut."""

from __future__ import annotations

import pytest

from vifusion.config import Config


@pytest.fixture(scope="module")
def service(indexed, tmp_path_factory):
    import shutil

    from vifusion.service import Service

    data, _, _ = indexed
    copy = tmp_path_factory.mktemp("cutoff") / "data"
    shutil.copytree(data, copy, ignore=shutil.ignore_patterns("writer.lock", "service.json"))
    with Service(Config(data_dir=copy)) as svc:
        yield svc


def scores(page) -> list[float]:
    return [m.score for m in page.results]


def test_the_weak_tail_is_dropped_by_default_and_a_requests_0_keeps_it(service):
    fraction = Config().min_relative_score
    assert fraction > 0
    everything = service.search(text="a cat", top_k=20, min_relative_score=0)
    best = everything.results[0].score
    assert any(s < fraction * best for s in scores(everything))  # there is a weak tail to drop
    cut = service.search(text="a cat", top_k=20)
    assert cut.results[0] == everything.results[0]  # the best moment (the cat) stays first
    assert scores(cut) == [s for s in scores(everything) if s >= fraction * best]


def test_every_page_is_cut_against_the_best_moment_of_the_whole_search(service):
    everything = scores(
        service.search(text="a rocket", modalities=["visual"], top_k=20, min_relative_score=0)
    )
    # a fraction that drops the weakest moment of the whole search, and only it
    weakest, next_weakest = sorted(everything)[:2]
    fraction = (weakest + next_weakest) / 2 / everything[0]
    whole = service.search(
        text="a rocket", modalities=["visual"], top_k=20, min_relative_score=fraction
    )
    best = whole.results[0].score
    assert len(whole.results) >= 3 and min(scores(whole)) >= fraction * best
    assert len(whole.results) < len(everything)
    pages, offset = [], 0
    while offset is not None:  # two at a time: page 2's own best would let weaker moments through
        page = service.search(
            text="a rocket",
            modalities=["visual"],
            top_k=2,
            offset=offset,
            min_relative_score=fraction,
        )
        pages += page.results
        offset = page.next_offset
    assert pages == whole.results


@pytest.mark.parametrize("fraction", [-0.1, 1.5])
def test_a_fraction_outside_0_to_1_is_refused(service, fraction):
    with pytest.raises(ValueError, match="min_relative_score"):
        service.search(text="a cat", min_relative_score=fraction)
