"""rackctl preprocessing model: text prompt -> token ids (and stop/bad word lists) for tensorrt_llm."""

import json
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rackctl_tokenizer import Tokenizer


def _param(args, key):
    params = json.loads(args["model_config"])["parameters"]
    return params[key]["string_value"]


def _text(value):
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _optional(request, name):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()


def words_to_list(tokenizer, words):
    """[[w1, w2, ...]] -> TRT-LLM's [1, 2, N] int32 layout: flat ids, then end offsets (-1 padded)."""
    ids, offsets = [], []
    for word in (w for w in (_text(x) for x in np.ravel(words)) if w):
        ids.extend(tokenizer.encode(word, add_special_tokens=False))
        offsets.append(len(ids))
    if not ids:
        return np.array([[[0], [-1]]], dtype=np.int32)
    offsets += [-1] * (len(ids) - len(offsets))
    return np.array([[ids, offsets]], dtype=np.int32)


class TritonPythonModel:
    def initialize(self, args):
        self.tokenizer = Tokenizer(_param(args, "tokenizer_dir"))
        self.add_special_tokens = _param(args, "add_special_tokens").lower() == "true"

    def execute(self, requests):
        responses = []
        for request in requests:
            query = _text(np.ravel(_optional(request, "QUERY"))[0])
            ids = self.tokenizer.encode(query, add_special_tokens=self.add_special_tokens)
            out_len = _optional(request, "REQUEST_OUTPUT_LEN").reshape(1, 1).astype(np.int32)
            end_id = _optional(request, "END_ID")
            pad_id = _optional(request, "PAD_ID")
            bad = _optional(request, "BAD_WORDS_DICT")
            stop = _optional(request, "STOP_WORDS_DICT")
            end = self.tokenizer.eos_id if end_id is None else int(np.ravel(end_id)[0])
            pad = self.tokenizer.pad_id if pad_id is None else int(np.ravel(pad_id)[0])
            outputs = [
                pb_utils.Tensor("INPUT_ID", np.array([ids], dtype=np.int32)),
                pb_utils.Tensor("REQUEST_INPUT_LEN", np.array([[len(ids)]], dtype=np.int32)),
                pb_utils.Tensor("REQUEST_OUTPUT_LEN", out_len),
                pb_utils.Tensor("OUT_END_ID", np.array([[end]], dtype=np.int32)),
                pb_utils.Tensor("OUT_PAD_ID", np.array([[pad]], dtype=np.int32)),
                pb_utils.Tensor("BAD_WORDS_IDS", words_to_list(self.tokenizer, [] if bad is None else bad)),
                pb_utils.Tensor("STOP_WORDS_IDS", words_to_list(self.tokenizer, [] if stop is None else stop)),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
