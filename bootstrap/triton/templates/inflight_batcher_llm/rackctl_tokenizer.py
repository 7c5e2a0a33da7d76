"""Tokenizer wrapper shared by rackctl's preprocessing and postprocessing models.

Uses the HF tokenizer (``transformers.AutoTokenizer``) when present, else the ``tokenizers`` library on
``<tokenizer_dir>/tokenizer.json`` (what an offline test ships).
"""

import os

EOS_CANDIDATES = ("</s>", "<|eot_id|>", "<|end_of_text|>", "<|endoftext|>", "<eos>", "[SEP]")


class Tokenizer:
    """encode/decode over whichever tokenizer library is installed."""

    def __init__(self, path):
        try:
            from transformers import AutoTokenizer  # noqa: PLC0415 - optional, tried first

            self._hf = AutoTokenizer.from_pretrained(path, legacy=False, padding_side="left")
            self._fast = None
            self.eos_id = self._hf.eos_token_id
            self.pad_id = self._hf.pad_token_id if self._hf.pad_token_id is not None else self.eos_id
        except ImportError:
            from tokenizers import Tokenizer as FastTokenizer  # noqa: PLC0415 - the fallback

            self._hf = None
            self._fast = FastTokenizer.from_file(os.path.join(path, "tokenizer.json"))
            found = [self._fast.token_to_id(t) for t in EOS_CANDIDATES]
            self.eos_id = next((i for i in found if i is not None), 0)
            self.pad_id = self.eos_id

    def encode(self, text, add_special_tokens=True):
        if self._hf is not None:
            return list(self._hf.encode(text, add_special_tokens=add_special_tokens))
        return list(self._fast.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids, skip_special_tokens=True):
        if self._hf is not None:
            return self._hf.decode(ids, skip_special_tokens=skip_special_tokens)
        return self._fast.decode(ids, skip_special_tokens=skip_special_tokens)
