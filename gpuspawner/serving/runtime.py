"""MLServer runtimes a replica loads (by the names in ``replica.RUNTIMES``).

- ``SafeSKLearnModel``: MLServer's scikit-learn runtime, with the model's
  complaints about its input (wrong number of features, wrong dtype) answered
  as 400 with the model's own message instead of a bare 500.
- ``PredictorModel``: the user's own class, named ``"predictor.py:Model"``
  (a file in the model directory and a class in it) with ``load()`` and
  ``predict(array) -> array``. Requests arrive batched by MLServer.
"""
from __future__ import annotations

import importlib.util
import os

import numpy as np
from mlserver.codecs import NumpyCodec, NumpyRequestCodec
from mlserver.errors import MLServerError
from mlserver.model import MLModel
from mlserver.types import InferenceRequest, InferenceResponse
from mlserver_sklearn import SKLearnModel

BAD_INPUT = (ValueError, TypeError, IndexError, KeyError)


class SafeSKLearnModel(SKLearnModel):
    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        try:
            return await super().predict(payload)
        except BAD_INPUT as e:
            raise MLServerError(f"model {self.name} cannot take this input: {e}", 400)


def load_predictor(model_dir: str, ref: str):
    """An instance of ``file.py:Class`` from the model directory."""
    filename, _, classname = ref.partition(":")
    if not filename.endswith(".py") or not classname:
        raise MLServerError(f"predictor must look like 'predictor.py:Model', got {ref!r}", 400)
    path = os.path.join(model_dir, filename)
    spec = importlib.util.spec_from_file_location("gpuhub_user_predictor", path)
    if spec is None or not os.path.isfile(path):
        raise MLServerError(f"no file {filename} in the model directory {model_dir}", 400)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, classname)()


class PredictorModel(MLModel):
    async def load(self) -> bool:
        extra = (self.settings.parameters.extra or {}) if self.settings.parameters else {}
        model_dir = self.settings.parameters.uri
        self._predictor = load_predictor(model_dir, extra.get("predictor", "predictor.py:Model"))
        if hasattr(self._predictor, "load"):
            self._predictor.load(model_dir) if _takes_argument(self._predictor.load) \
                else self._predictor.load()
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        try:
            data = self.decode_request(payload, default_codec=NumpyRequestCodec)
            result = np.asarray(self._predictor.predict(data))
        except BAD_INPUT as e:
            raise MLServerError(f"model {self.name} cannot take this input: {e}", 400)
        except MLServerError:
            raise
        except Exception as e:  # the predictor's own failure: a clear 500, the server stays up
            raise MLServerError(f"model {self.name} failed: {type(e).__name__}: {e}", 500)
        return InferenceResponse(model_name=self.name, model_version=self.version,
                                 outputs=[NumpyCodec.encode_output("predict", result)])


def _takes_argument(fn) -> bool:
    import inspect
    try:
        return len(inspect.signature(fn).parameters) >= 1
    except (TypeError, ValueError):
        return False
