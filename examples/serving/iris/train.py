"""Train the example iris classifier and write it where a deployment can
serve it: ``python train.py OUTPUT_DIR [--C 1.0]`` writes OUTPUT_DIR/model.joblib.
Without OUTPUT_DIR it writes to $OUTPUT_DIR, the output directory a job
submitted from JupyterLab gets (then *Deploy outputs…* in the Jobs panel).

Run it as a GPU Hub job, then deploy the directory:

    gpuhub submit --gpus 0 -f -- python "$PWD/examples/serving/iris/train.py" models/iris-v1
    gpuhub deploy iris models/iris-v1

(the job runs in your workspace: the script by its full path; docs/serving.md)
"""
import argparse
import json
import os

import joblib
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split

parser = argparse.ArgumentParser()
parser.add_argument("output_dir", nargs="?", default=os.environ.get("OUTPUT_DIR"),
                    help="where model.joblib goes (default: $OUTPUT_DIR)")
parser.add_argument("--C", type=float, default=1.0, help="inverse regularisation strength")
args = parser.parse_args()
if not args.output_dir:
    parser.error("give OUTPUT_DIR (or run it as a job with $OUTPUT_DIR set)")

X, y = load_iris(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, random_state=0)
model = LogisticRegression(C=args.C, max_iter=1000).fit(X_train, y_train)
os.makedirs(args.output_dir, exist_ok=True)
joblib.dump(model, os.path.join(args.output_dir, "model.joblib"))
with open(os.path.join(args.output_dir, "metrics.json"), "w") as f:
    json.dump({"accuracy": model.score(X_test, y_test), "C": args.C}, f)
print(f"accuracy {model.score(X_test, y_test):.3f}; model in {args.output_dir}/model.joblib")
