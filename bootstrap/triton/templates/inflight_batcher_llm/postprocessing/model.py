"""rackctl postprocessing model: generated token ids -> text."""

import json
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rackctl_tokenizer import Tokenizer


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"])["parameters"]
        self.tokenizer = Tokenizer(params["tokenizer_dir"]["string_value"])
        self.skip_special = params["skip_special_tokens"]["string_value"].lower() == "true"

    def execute(self, requests):
        responses = []
        for request in requests:
            tokens = pb_utils.get_input_tensor_by_name(request, "TOKENS_BATCH").as_numpy()
            lengths = pb_utils.get_input_tensor_by_name(request, "SEQUENCE_LENGTH").as_numpy()
            texts = []
            for beams, beam_lengths in zip(tokens, lengths, strict=True):
                for beam, length in zip(beams, beam_lengths, strict=True):
                    ids = [int(t) for t in beam[: int(length)]]
                    texts.append(self.tokenizer.decode(ids, skip_special_tokens=self.skip_special))
            out = np.array(texts, dtype=object).reshape(tokens.shape[0], -1)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT", out)]))
        return responses
