"""The embedding model with its real weights (no mocks): does it see what is in a photo?"""

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from vifusion.extract._seen_query import FACE_WORDS
from vifusion.extract.model import CLASS_PROMPT, Embedder, imagenet_class_names
from vifusion.samples import photo
from vifusion.types import SEMANTIC_DIM, VISUAL_DIM

PHOTOS = ["chelsea", "coffee", "rocket", "motorcycle"]


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def embedder(models_dir):
    return Embedder(cache_dir=models_dir)


def test_vectors_have_the_right_shape_and_unit_length(embedder):
    visual, semantic = embedder.embed_images([photo(p) for p in PHOTOS])
    assert visual.shape == (4, VISUAL_DIM) and semantic.shape == (4, SEMANTIC_DIM)
    assert visual.dtype == semantic.dtype == np.float32
    assert np.allclose(np.linalg.norm(visual, axis=1), 1, atol=1e-5)
    assert np.allclose(np.linalg.norm(semantic, axis=1), 1, atol=1e-5)


def test_text_finds_the_photo_it_describes(embedder):
    _, semantic = embedder.embed_images([photo(p) for p in PHOTOS])
    queries = embedder.embed_text(["a cat", "a cup of coffee", "a rocket", "a motorcycle"])
    best = (queries @ semantic.T).argmax(axis=1)
    assert [PHOTOS[i] for i in best] == PHOTOS


def test_a_mirrored_crop_is_closest_to_its_own_photo(embedder):
    visual, _ = embedder.embed_images([photo(p) for p in PHOTOS])
    img = photo("coffee")
    h, w = img.shape[:2]
    variant = np.ascontiguousarray(img[h // 8 : -h // 8, w // 8 : -w // 8][:, ::-1])
    q, _ = embedder.embed_images([variant])
    assert PHOTOS[int((q @ visual.T).argmax())] == "coffee"


def test_frame_batches_give_the_same_vectors_as_single_frames(embedder):
    frames = np.stack([photo(p)[:224, :298] for p in ["chelsea", "coffee"]])
    v_batch, s_batch = embedder.embed_frames(frames)
    v_one, s_one = embedder.embed_frames(frames[:1])
    assert np.allclose(v_batch[0], v_one[0], atol=1e-4) and np.allclose(
        s_batch[0], s_one[0], atol=1e-4
    )


def test_class_name_vectors_are_cached_and_reused(tmp_path):
    first = Embedder(cache_dir=tmp_path)
    assert len(list(tmp_path.glob("class-text-*.npy"))) == 1
    second = Embedder(cache_dir=tmp_path)
    assert np.array_equal(first.class_vectors.numpy(), second.class_vectors.numpy())


class _TogetherText:
    """A text model whose every caller returns at once (the cache write is under test, not
    the model): the extractors' writes then meet."""

    def __init__(self, callers: int) -> None:
        self.barrier = threading.Barrier(callers)

    def encode(self, prompts):
        self.barrier.wait()
        return np.ones((len(prompts), SEMANTIC_DIM), np.float32)


def test_extractors_starting_at_once_cache_the_class_vectors_side_by_side(tmp_path):
    # Extractors on one node share its models dir and start together: each writes the cache
    # under a name of its own before moving it in place, so none fails on another's file.
    starting = [Embedder.__new__(Embedder) for _ in range(8)]
    text = _TogetherText(len(starting))
    for e in starting:
        e._text = text
    with ThreadPoolExecutor(len(starting)) as pool:
        got = list(pool.map(lambda e: e._class_vectors(tmp_path), starting))
    assert all(np.array_equal(g, got[0]) for g in got)
    assert [p.name for p in tmp_path.iterdir()] == [
        p.name for p in tmp_path.glob("class-text-*.npy")
    ]


def test_with_the_class_vectors_cached_the_text_model_loads_only_when_text_is_embedded(tmp_path):
    Embedder(cache_dir=tmp_path)
    cached = Embedder(cache_dir=tmp_path)
    frames = np.random.default_rng(0).integers(0, 256, (2, 224, 224, 3), dtype=np.uint8)
    with_faces = cached.embed_frames(
        frames, terms=[(list(FACE_WORDS), [1.0] * len(FACE_WORDS)), ([], [])]
    )
    # an extractor without speech or screen text never loads it, faces or none (seconds and
    # memory an actor): the face words' vectors come with the class names'
    assert cached._text is None
    query = cached.embed_text(["a photo of a cat"])
    assert query.shape == (1, 384) and np.isclose(np.linalg.norm(query), 1.0, atol=1e-5)
    # the cached face words are the words the text model gives
    assert np.allclose(
        cached._term_vectors["face"].numpy(),
        cached.embed_text([CLASS_PROMPT.format("face")])[0],
        atol=1e-4,
    )
    assert not np.allclose(with_faces[1][0], cached.embed_frames(frames[:1])[1][0], atol=1e-3)


def _read_as(embedder, **readings: float) -> np.ndarray:
    """A frame's semantic vector where the classifier read ``readings`` (class name ->
    probability; "_" for a space): the concept mixing under test, the classifier set aside."""
    import torch

    names = {n: i for i, n in enumerate(imagenet_class_names())}
    probs = torch.zeros((1, 1000))
    for name, p in readings.items():
        probs[0, names[name.replace("_", " ")]] = p
    vector = embedder.concepts(probs)[0].numpy()
    return vector / np.linalg.norm(vector)


def test_the_generic_word_finds_a_breed_and_the_breed_name_still_picks_its_own(embedder):
    # Without hypernyms "a dog" was nearer a grey wolf than a Samoyed (0.47 vs 0.43): the
    # breed names are far from the word people type. With them a dog is also a dog.
    samoyed = _read_as(embedder, Samoyed=0.55, Great_Pyrenees_dog=0.15, Kuvasz=0.1,
                       Alaskan_tundra_wolf=0.1, Arctic_fox=0.1)  # fmt: skip
    husky = _read_as(embedder, Siberian_Husky=0.5, Alaskan_Malamute=0.2, husky=0.2, grey_wolf=0.1)
    wolf = _read_as(embedder, grey_wolf=0.6, coyote=0.2, red_wolf_or_maned_wolf=0.1, dingo=0.1)
    cat = _read_as(embedder, tabby_cat=0.6, Persian_cat=0.3, Egyptian_Mau=0.1)
    dog, breed = embedder.embed_text(["a dog", "Samoyed"])
    assert min(dog @ samoyed, dog @ husky) > max(dog @ wolf, dog @ cat)
    assert breed @ samoyed > breed @ husky


def test_an_everyday_word_finds_the_photo_through_the_query_projection(embedder, models_dir):
    # The raw query vector ranked a stained microscope slide above the Hubble deep field for
    # "a galaxy": the names of what the classifier sees there lie far from the word typed.
    # Taken where frames are (its nearest concepts mixed in as a frame's are), it finds the
    # galaxies, with the torch text model and the ONNX one alike.
    from vifusion.extract._text_onnx import TextEmbedder, onnx_path

    names = ["hubble", "ihc", "retina", "coins", "camera", "coffee", "chelsea"]
    _, frames = embedder.embed_images([photo(p) for p in names])
    queries = ["a galaxy"]
    onnx = TextEmbedder(onnx_path(models_dir))
    for projected in (
        embedder.project_query(embedder.embed_text(queries)),
        onnx.project_query(onnx.embed_text(queries)),
    ):
        assert [names[i] for i in (projected @ frames.T).argmax(axis=1)] == ["hubble"]
