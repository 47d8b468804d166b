"""Config refuses settings that contradict each other or leave their range, and says which."""

from __future__ import annotations

import pytest

from vifusion.config import Config


def test_defaults_are_accepted() -> None:
    Config()


@pytest.mark.parametrize(
    "settings, named",
    [
        (
            dict(fusion_min_bytes=2 << 20, fusion_max_bytes=1 << 20),
            ("fusion_min_bytes=2097152", "fusion_max_bytes=1048576"),
        ),
        (
            dict(ocr_still_interval_s=60.0, ocr_full_interval_s=30.0),
            ("ocr_still_interval_s=60.0", "ocr_full_interval_s=30.0"),
        ),
        (dict(ocr_gate_side=720, ocr_frame_side=720), ("ocr_gate_side=720", "ocr_frame_side=720")),
        (
            dict(fetch_rate_window_s=120.0, fetch_deadline_s=60.0),
            ("fetch_rate_window_s=120.0", "fetch_deadline_s=60.0"),
        ),
    ],
)
def test_refuses_pairs_out_of_order(settings: dict, named: tuple[str, str]) -> None:
    with pytest.raises(ValueError) as err:
        Config(**settings)
    for text in named:
        assert text in str(err.value)


def test_pairs_in_order_are_accepted() -> None:
    cfg = Config(
        fusion_min_bytes=1 << 20,
        fusion_max_bytes=1 << 20,
        ocr_still_interval_s=30.0,
        ocr_gate_side=0,
        ocr_frame_side=64,
        fetch_rate_window_s=60.0,
        fetch_deadline_s=60.0,
    )
    assert cfg.fusion_min_bytes == cfg.fusion_max_bytes


def test_a_pair_split_between_file_and_environment_is_checked_whole(tmp_path) -> None:
    file = tmp_path / "vifusion.json"
    file.write_text('{"fusion_max_bytes": 1048576}')
    with pytest.raises(ValueError) as err:
        Config.load(file, env={"VIFUSION_FUSION_MIN_BYTES": "2097152"})
    assert "fusion_min_bytes=2097152" in str(err.value) and "fusion_max_bytes=1048576" in str(
        err.value
    )


@pytest.mark.parametrize(
    "name, value",
    [
        ("codec_min_recall", 1.5),
        ("ocr_change_share", -0.1),
        ("min_relative_score", 2.0),
        ("segment_drop", 1.1),
        ("ocr_min_confidence", 1.01),
        ("speech_max_no_speech_prob", -1.0),
        ("fusion_min_bytes", 0),
        ("query_window", 0),
    ],
)
def test_refuses_a_share_or_a_count_out_of_range(name: str, value: float) -> None:
    with pytest.raises(ValueError) as err:
        Config(**{name: value})
    assert name in str(err.value) and f"input_value={value}" in str(err.value)


def test_an_update_is_checked_as_a_new_config_is(tmp_path) -> None:
    # Live settings (Serve's user_config) arrive as changes to a running Config.
    cfg = Config(data_dir=tmp_path, rate_limit_rps=10.0)
    assert cfg.updated({"rate_limit_burst": 7}) == cfg.model_copy(update={"rate_limit_burst": 7})
    with pytest.raises(ValueError, match="rate_limit_rps"):
        cfg.updated({"rate_limit_rps": -1})
    with pytest.raises(ValueError) as err:
        cfg.updated({"fusion_min_bytes": 16 << 20})
    assert "fusion_min_bytes=16777216" in str(err.value) and "fusion_max_bytes=8388608" in str(
        err.value
    )
    with pytest.raises(ValueError, match="rate_limit_rsp"):
        cfg.updated({"rate_limit_rsp": 5})  # a misspelt setting is not quietly ignored


def test_sparse_keep_takes_a_pair_one_share_or_the_environment() -> None:
    assert Config().codec_sparse_keep == (0.4, 0.8)
    assert Config(codec_sparse_keep=0.5).codec_sparse_keep == (0.5, 0.5)
    assert Config.load(env={"VIFUSION_CODEC_SPARSE_KEEP": "0.3,0.6"}).codec_sparse_keep == (
        0.3,
        0.6,
    )
    assert Config.load(env={"VIFUSION_CODEC_SPARSE_KEEP": "0.5"}).codec_sparse_keep == (0.5, 0.5)


@pytest.mark.parametrize(
    "keep, named",
    [
        ((0.0, 0.5), "codec_sparse_keep (visual)=0.0"),
        ((0.5, 1.2), "codec_sparse_keep (semantic)=1.2"),
        ((1.0, 1.0), "keeps all 1664 dimensions"),  # that is int8: no rung below it
        ((0.2, 0.2), "keeps 333 dimensions, no more than pq's 352"),  # no rung above pq
    ],
)
def test_sparse_keep_out_of_range_is_refused_naming_it(
    keep: tuple[float, float], named: str
) -> None:
    with pytest.raises(ValueError) as err:
        Config(codec_sparse_keep=keep)
    assert named in str(err.value)


def test_several_api_replicas_need_shared_actors() -> None:
    """A replica that owned the shards would take them down with it, under the others."""
    with pytest.raises(ValueError, match="api_replicas > 1 needs shared_actors"):
        Config(api_replicas=2)
    assert Config(api_replicas=2, shared_actors=True).api_replicas == 2
