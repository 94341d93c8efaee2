#!/usr/bin/env python3
"""Executes a notebook with nbclient (a failing cell fails this), then checks that it
drew at least MIN figures and that none of them is blank (a single colour).

    check-notebook.py NOTEBOOK.ipynb MIN_FIGURES
"""

import base64
import io
import pathlib
import sys

import nbclient
import nbformat
from matplotlib import image


def main() -> int:
    path, want = pathlib.Path(sys.argv[1]), int(sys.argv[2])
    nb = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(nb, timeout=1200, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    figures = [
        base64.b64decode(out["data"]["image/png"])
        for cell in nb.cells if cell.cell_type == "code"
        for out in cell.get("outputs", []) if "image/png" in out.get("data", {})
    ]
    for i, png in enumerate(figures):
        pixels = image.imread(io.BytesIO(png), format="png")
        flat = pixels.reshape(-1, pixels.shape[-1])
        if (flat == flat[0]).all():
            print(f"{path}: figure {i + 1} is blank")
            return 1
    print(f"{path}: every cell ran; {len(figures)} figure(s), none blank")
    if len(figures) < want:
        print(f"{path}: expected at least {want} figures")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
