"""The lab's TypeScript types of the service's objects are generated from
the service's OpenAPI document (``jlpm gen:types`` in extensions/gpuhub-lab,
openapi-typescript from the npm registry): regenerated here, they must be
what is committed, so the front end cannot drift from the service."""
from __future__ import annotations

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAB = os.path.join(ROOT, "extensions", "gpuhub-lab")


def test_the_labs_service_types_are_the_openapi_documents(tmp_path):
    tool = os.path.join(LAB, "node_modules", ".bin", "openapi-typescript")
    assert os.path.exists(tool), ("no openapi-typescript: `make test` installs the lab's npm "
                                  "packages (jlpm install in extensions/gpuhub-lab)")
    out = tmp_path / "service.generated.ts"
    subprocess.run([tool, os.path.join(ROOT, "gpuspawner", "service", "api", "openapi.yaml"),
                    "-o", str(out)], check=True, capture_output=True, cwd=LAB)
    with open(os.path.join(LAB, "src", "service.generated.ts")) as f:
        committed = f.read()
    assert out.read_text() == committed, (
        "extensions/gpuhub-lab/src/service.generated.ts is not what openapi.yaml generates: "
        "run `jlpm gen:types` in extensions/gpuhub-lab and commit it")
