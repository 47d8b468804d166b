"""English words in other languages (``vifusion.query.lexicon``), read from dictionaries
written here as FreeDict's and Debian's are."""

from __future__ import annotations

from pathlib import Path

from tests.query._dictionaries import write_dictd
from vifusion.catalog import FUZZY_WEIGHT
from vifusion.query import lexicon
from vifusion.query.lexicon import Lexicon, coverage

SPANISH = {
    "eye": "ojo",
    "ear": "1. oreja\n2. espiga",
    "face": "cara, faz, rostro",
    "mouth": '1. boca <f> [anat.]\n      "shut your mouth" - cierra la boca\n2. desembocadura',
    "early": "de buena hora",
    "ice cream": "helado",
}


def test_a_word_is_put_in_each_language_a_dictionary_names(tmp_path):
    write_dictd(tmp_path, "freedict-eng-spa", SPANISH)
    (tmp_path / "en-nl.tsv").write_text("eye\toog\nface\tgezicht\nearly\tte vroeg\n", "utf-8")
    words = Lexicon([tmp_path, tmp_path / "missing"])
    assert words.languages == {"es", "nl"}
    assert words.translations("Face", "es") == ("cara", "faz", "rostro")
    assert words.translations("eye", "nl") == ("oog",)
    assert words.translations("eye", "de") == ()


def test_notes_examples_and_phrases_are_not_translations(tmp_path):
    write_dictd(tmp_path, "freedict-eng-spa", SPANISH)
    words = Lexicon([tmp_path])
    assert words.translations("mouth", "es") == ("boca", "desembocadura")
    assert words.translations("early", "es") == ()  # a phrase: keyword search is word by word
    assert words.translations("ice", "es") == ()  # headwords of two words are not read


def test_a_plural_is_looked_up_with_its_singular(tmp_path):
    write_dictd(tmp_path, "freedict-eng-spa", SPANISH)
    write_dictd(tmp_path, "freedict-eng-deu", {"ears": "Ohren", "ear": "Ohr"})
    words = Lexicon([tmp_path])
    assert words.translations("ears", "es") == ("oreja", "espiga")
    assert words.translations("ears", "de") == ("Ohren", "Ohr")


def test_a_small_dictionary_is_filled_from_its_reverse(tmp_path):
    write_dictd(tmp_path, "freedict-eng-ita", {"nose": "naso"})
    write_dictd(tmp_path, "freedict-ita-eng", {"occhio": "eye", "naso": "nose, snout"})
    words = Lexicon([tmp_path])
    assert words.translations("eye", "it") == ("occhio",)
    assert words.translations("nose", "it") == ("naso",)
    assert words.translations("snout", "it") == ("naso",)


def test_a_large_dictionary_is_not(tmp_path, monkeypatch):
    monkeypatch.setattr(lexicon, "REVERSE_BELOW", 1)
    write_dictd(tmp_path, "freedict-eng-ita", {"nose": "naso"})
    write_dictd(tmp_path, "freedict-ita-eng", {"occhio": "eye"})
    assert Lexicon([tmp_path]).translations("eye", "it") == ()


def test_at_most_the_commonest_translations_are_kept(tmp_path):
    many = ", ".join(f"w{i}" for i in range(20))
    write_dictd(tmp_path, "freedict-eng-deu", {"set": many})
    assert Lexicon([tmp_path]).translations("set", "de") == tuple(
        f"w{i}" for i in range(lexicon.MAX_TRANSLATIONS)
    )


def test_slots_keep_the_english_word_for_names_both_languages_share():
    words = Lexicon([Path("/nonexistent")])
    assert words.slots(["Python", "eye"], "es") == [("Python",), ("eye",)]


def test_coverage_counts_the_query_words_said_in_any_form():
    slots = [("nose", "nariz"), ("eyes", "ojo"), ("Zorblax",)]
    assert coverage(slots, "Mis ojos y la nariz.") == 2 / 3
    assert coverage(slots, "La NARIZ de Zorblax") == 2 / 3
    assert coverage(slots, "Nada de eso.") == 0.0
    assert coverage([("ear", "oreja")], "orejas") == 1.0
    assert coverage([("ear", "oreja")], "ore") == 0.0  # a stem shorter than the word's


def test_a_word_heard_in_a_near_spelling_counts_as_keyword_search_counts_it():
    slots = [("eyebrow", "sobrancelha"), ("nose", "nariz")]
    assert coverage(slots, "Subrancelha. Nariz.") == (FUZZY_WEIGHT + 1) / 2
    assert coverage(slots, "Sabrencolho.") == 0.0  # too far


def test_a_damaged_dictionary_costs_its_words_not_the_search(tmp_path, caplog):
    write_dictd(tmp_path, "freedict-eng-spa", SPANISH)
    (tmp_path / "freedict-eng-fra.index").write_text("nose\tA\tZ\n", "utf-8")
    (tmp_path / "freedict-eng-fra.dict.dz").write_bytes(b"not gzip at all")
    (tmp_path / "en-it.tsv").write_bytes(b"\xff\xfe\tbad\nnose\tnaso\n")
    words = Lexicon([tmp_path])
    assert words.translations("nose", "fr") == ()
    assert "freedict-eng-fra" in caplog.text
    assert words.translations("eye", "es") == ("ojo",)
    assert words.translations("nose", "it") == ("naso",)  # undecodable bytes replaced
