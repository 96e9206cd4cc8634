"""A custom predictor for the ``predictor`` runtime: copy it next to a
model.joblib and deploy with ``"runtime": "predictor"``. MLServer batches
concurrent requests into one ``predict`` call."""
import os

import joblib
import numpy as np


class Model:
    def load(self, model_dir):
        self.model = joblib.load(os.path.join(model_dir, "model.joblib"))

    def predict(self, features):
        features = np.asarray(features, dtype=float)
        if features.ndim != 2 or features.shape[1] != 4:
            raise ValueError(f"expects rows of 4 measurements, got shape {features.shape}")
        return self.model.predict_proba(features)
