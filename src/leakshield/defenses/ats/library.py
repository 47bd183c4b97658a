"""ATS's library of 50 indexed image transformations (Gao et al., *Automatic Transformation Search Against
Deep Leakage from Gradients*, TPAMI 2023, Table 1; AutoAugment's operations, Cubuk et al., CVPR 2019).

Each entry is an operation and a magnitude index m ∈ 0..9 that maps into ``linspace(lo, hi, 10)`` as in
the authors' PIL code: shearX/Y 0–0.3 (random sign, bicubic, black fill); translateX/Y 0–150/331
of the width/height (random sign, nearest, black fill); rotate 0–30° (counter-clockwise, grey 128 fill);
color/contrast/sharpness/brightness factor 1 ± (0–0.5) (random sign); posterize to round(linspace(8, 4))
bits; solarize above linspace(256, 0); autocontrast, equalize and invert ignore m. Every operation of a
policy is always applied (AutoAugment's probabilities are ignored, as in the paper).

======  ============  =  ======  ============  =  ======  ============  =  ======  ============  =
index   operation     m  index   operation     m  index   operation     m  index   operation     m
======  ============  =  ======  ============  =  ======  ============  =  ======  ============  =
0       invert        7  13      brightness    5  26      brightness    6  39      color         0
1       contrast      6  14      sharpness     9  27      color         8  40      solarize      1
2       rotate        2  15      brightness    9  28      solarize      0  41      autocontrast  0
3       translateX    9  16      translateX    4  29      invert        0  42      translateY    3
4       sharpness     1  17      equalize      1  30      equalize      0  43      translateY    4
5       sharpness     3  18      contrast      7  31      autocontrast  0  44      autocontrast  1
6       shearY        2  19      sharpness     5  32      equalize      8  45      solarize      1
7       translateY    2  20      color         5  33      equalize      4  46      equalize      5
8       autocontrast  5  21      translateX    5  34      color         5  47      invert        1
9       equalize      2  22      equalize      7  35      equalize      5  48      translateY    3
10      shearY        5  23      autocontrast  8  36      autocontrast  4  49      autocontrast  1
11      posterize     5  24      translateY    3  37      solarize      4
12      color         3  25      sharpness     6  38      brightness    3
======  ============  =  ======  ============  =  ======  ============  =  ======  ============  =

The table follows the paper. The released code's list differs at two entries: 16 is ``equalize`` there
(translateX 4 in the paper) and 43 is translateY 3 (4 in the paper).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageEnhance, ImageOps

#: (operation, magnitude index) of the 50 entries, in index order (paper Table 1)
TABLE: tuple[tuple[str, int], ...] = (
    ("invert", 7),
    ("contrast", 6),
    ("rotate", 2),
    ("translateX", 9),
    ("sharpness", 1),
    ("sharpness", 3),
    ("shearY", 2),
    ("translateY", 2),
    ("autocontrast", 5),
    ("equalize", 2),
    ("shearY", 5),
    ("posterize", 5),
    ("color", 3),
    ("brightness", 5),
    ("sharpness", 9),
    ("brightness", 9),
    ("translateX", 4),
    ("equalize", 1),
    ("contrast", 7),
    ("sharpness", 5),
    ("color", 5),
    ("translateX", 5),
    ("equalize", 7),
    ("autocontrast", 8),
    ("translateY", 3),
    ("sharpness", 6),
    ("brightness", 6),
    ("color", 8),
    ("solarize", 0),
    ("invert", 0),
    ("equalize", 0),
    ("autocontrast", 0),
    ("equalize", 8),
    ("equalize", 4),
    ("color", 5),
    ("equalize", 5),
    ("autocontrast", 4),
    ("solarize", 4),
    ("brightness", 3),
    ("color", 0),
    ("solarize", 1),
    ("autocontrast", 0),
    ("translateY", 3),
    ("translateY", 4),
    ("autocontrast", 1),
    ("solarize", 1),
    ("equalize", 5),
    ("invert", 1),
    ("translateY", 3),
    ("autocontrast", 1),
)
LIBRARY_SIZE = len(TABLE)

#: magnitude ranges, index m → linspace(lo, hi, 10)[m]
RANGES: dict[str, tuple[float, float]] = {
    "shearX": (0.0, 0.3),
    "shearY": (0.0, 0.3),
    "translateX": (0.0, 150 / 331),
    "translateY": (0.0, 150 / 331),
    "rotate": (0.0, 30.0),
    "color": (0.0, 0.5),
    "contrast": (0.0, 0.5),
    "sharpness": (0.0, 0.5),
    "brightness": (0.0, 0.5),
    "posterize": (8.0, 4.0),
    "solarize": (256.0, 0.0),
}
#: operations whose magnitude takes a random sign (drawn per image)
SIGNED = frozenset(
    {"shearX", "shearY", "translateX", "translateY", "color", "contrast", "sharpness", "brightness"}
)
#: operations that move pixels (and leave a fill where nothing moved in)
GEOMETRIC = frozenset({"shearX", "shearY", "translateX", "translateY", "rotate"})
ROTATE_FILL = 128


def magnitude(operation: str, index: int) -> float:
    """The magnitude of ``operation`` at index ``index`` (0..9); 0 for operations without one."""
    if operation not in RANGES:
        return 0.0
    lo, hi = RANGES[operation]
    value = float(np.linspace(lo, hi, 10)[index])
    return float(round(value)) if operation == "posterize" else value


@dataclass(frozen=True)
class Transformation:
    """One library entry: its ``index``, ``operation`` and magnitude index ``level`` (0..9)."""

    index: int
    operation: str
    level: int

    @property
    def magnitude(self) -> float:
        return magnitude(self.operation, self.level)

    @property
    def signed(self) -> bool:
        return self.operation in SIGNED

    def describe(self) -> str:
        value = self.magnitude
        shown = (
            "" if self.operation not in RANGES else f"({self.level}: {'±' if self.signed else ''}{value:.3g})"
        )
        return f"{self.index:2d} {self.operation}{shown}"

    def __call__(self, image: Image.Image, sign: int = 1) -> Image.Image:
        """Apply to a PIL image (mode L or RGB); ``sign`` (±1) is used by the signed operations."""
        return OPERATIONS[self.operation](image, self.magnitude * (sign if self.signed else 1))


def transformation(index: int) -> Transformation:
    """The library entry ``index`` (0..49)."""
    if not 0 <= index < LIBRARY_SIZE:
        raise IndexError(f"transformation index {index} is out of range; allowed: 0..{LIBRARY_SIZE - 1}")
    operation, level = TABLE[index]
    return Transformation(index, operation, level)


def _affine(image: Image.Image, coefficients: tuple[float, ...], resample: int) -> Image.Image:
    fill = 0 if image.mode == "L" else (0,) * len(image.getbands())
    return image.transform(image.size, Image.Transform.AFFINE, coefficients, resample, fillcolor=fill)


def _rotate(image: Image.Image, degrees: float) -> Image.Image:
    fill = ROTATE_FILL if image.mode == "L" else (ROTATE_FILL,) * len(image.getbands())
    return image.rotate(degrees, fillcolor=fill)


OPERATIONS: dict[str, Callable[[Image.Image, float], Image.Image]] = {
    "shearX": lambda im, v: _affine(im, (1, v, 0, 0, 1, 0), Image.Resampling.BICUBIC),
    "shearY": lambda im, v: _affine(im, (1, 0, 0, v, 1, 0), Image.Resampling.BICUBIC),
    "translateX": lambda im, v: _affine(im, (1, 0, v * im.size[0], 0, 1, 0), Image.Resampling.NEAREST),
    "translateY": lambda im, v: _affine(im, (1, 0, 0, 0, 1, v * im.size[1]), Image.Resampling.NEAREST),
    "rotate": _rotate,
    "color": lambda im, v: ImageEnhance.Color(im).enhance(1 + v),
    "contrast": lambda im, v: ImageEnhance.Contrast(im).enhance(1 + v),
    "sharpness": lambda im, v: ImageEnhance.Sharpness(im).enhance(1 + v),
    "brightness": lambda im, v: ImageEnhance.Brightness(im).enhance(1 + v),
    "posterize": lambda im, v: ImageOps.posterize(im, int(v)),
    "solarize": lambda im, v: ImageOps.solarize(im, int(v)),
    "autocontrast": lambda im, v: ImageOps.autocontrast(im),
    "equalize": lambda im, v: ImageOps.equalize(im),
    "invert": lambda im, v: ImageOps.invert(im),
}


def describe_library() -> list[str]:
    """One line per entry (``leakshield list transformations``)."""
    return [transformation(i).describe() for i in range(LIBRARY_SIZE)]
