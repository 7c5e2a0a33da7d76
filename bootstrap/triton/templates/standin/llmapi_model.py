"""Stand-in for the LLM-API ``tensorrt_llm`` model on a machine without a GPU (``rackctl triton load-check``).

A test double by necessity: the LLM API needs an NVIDIA GPU. Same inputs and outputs as the real model; it
answers the prompt's own words (an echo), ``max_tokens`` words at most, one response per word when streaming.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def _value(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return default
    value = np.ravel(tensor.as_numpy())[0]
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _text(text):
    return [pb_utils.Tensor("text_output", np.array([[text]], dtype=object))]


class TritonPythonModel:
    def initialize(self, args):
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(json.loads(args["model_config"]))

    def execute(self, requests):
        responses = []
        for request in requests:
            words = str(_value(request, "text_input", "")).split()[: int(_value(request, "max_tokens", 16))]
            stream = bool(_value(request, "stream", False))
            if not self.decoupled:
                if stream:
                    error = pb_utils.TritonError("stream=true needs the decoupled model")
                    responses.append(pb_utils.InferenceResponse(error=error))
                else:
                    responses.append(pb_utils.InferenceResponse(output_tensors=_text(" ".join(words))))
                continue
            sender = request.get_response_sender()
            for chunk in [[w] for w in words] if stream else [words]:
                sender.send(pb_utils.InferenceResponse(output_tensors=_text(" ".join(chunk))))
            sender.send(flags=FINAL)
        return None if self.decoupled else responses
