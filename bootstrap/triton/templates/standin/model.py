"""Stand-in for the ``tensorrt_llm`` model on a machine without a GPU (used by ``rackctl triton load-check``).

A test double by necessity: TensorRT-LLM engines need an NVIDIA GPU. It honours the same inputs and outputs
as the real model: it "generates" the prompt's own token ids (an echo), ``request_output_len`` of them
at most, one response per token when decoupled and ``streaming`` is set.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def _value(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else np.ravel(tensor.as_numpy())[0]


def _tensors(tokens):
    ids = np.array([[tokens]], dtype=np.int32).reshape(1, 1, len(tokens))
    return [
        pb_utils.Tensor("output_ids", ids),
        pb_utils.Tensor("sequence_length", np.array([[len(tokens)]], dtype=np.int32)),
    ]


class TritonPythonModel:
    def initialize(self, args):
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(json.loads(args["model_config"]))

    def execute(self, requests):
        responses = []
        for request in requests:
            ids = np.ravel(pb_utils.get_input_tensor_by_name(request, "input_ids").as_numpy())
            length = int(_value(request, "input_lengths", len(ids)))
            wanted = int(_value(request, "request_output_len", 16))
            streaming = bool(_value(request, "streaming", False))
            prompt = [int(t) for t in ids[:length]]
            tokens = (prompt * (wanted // max(len(prompt), 1) + 1))[:wanted] if prompt else []
            if not self.decoupled:
                if streaming:
                    error = pb_utils.TritonError("streaming requires decoupled mode (model_transaction_policy)")
                    responses.append(pb_utils.InferenceResponse(error=error))
                else:
                    responses.append(pb_utils.InferenceResponse(output_tensors=_tensors(tokens)))
                continue
            sender = request.get_response_sender()
            chunks = [[t] for t in tokens] if streaming else [tokens]
            for chunk in chunks:
                sender.send(pb_utils.InferenceResponse(output_tensors=_tensors(chunk)))
            sender.send(flags=FINAL)
        return None if self.decoupled else responses
