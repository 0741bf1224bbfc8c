"""Image data for the ``resnet`` workload, loaded eagerly into memory.

Two sources, both returned as an :class:`ImageData` (all samples in one tensor):

* **Default: scikit-learn's handwritten digits** (:func:`load_digits_images`).
  ``sklearn.datasets.load_digits`` ships 1,797 grayscale 8x8 images of the
  digits 0-9 inside the scikit-learn package (no network; pixel values are
  integers 0..16; https://scikit-learn.org/stable/modules/generated/sklearn.datasets.load_digits.html).
  They are scaled to [0, 1], upsampled **once** to ``resolution x resolution``
  with ``torch.nn.functional.interpolate(mode="bilinear", align_corners=False,
  antialias=False)`` (deterministic on CPU), and repeated to 3 channels so that
  an unmodified torchvision ResNet (3 input channels) takes them.
* **A user's directory** (:func:`load_image_folder`) in the layout of
  ``torchvision.datasets.ImageFolder`` (``root/<class>/<image>``; classes are the
  sorted sub-folder names, labels their indices; files are kept by extension;
  https://docs.pytorch.org/vision/stable/generated/torchvision.datasets.ImageFolder.html).
  Every image is decoded **eagerly at load time**, converted to RGB, resized with
  ``torchvision.transforms.Resize(resolution)`` (shorter side, bilinear with
  antialias) and ``CenterCrop(resolution)``, and stored as ``uint8``. Eager loading
  is a deliberate choice: a corrupt or unreadable file raises :class:`DataError`
  when the workload is built, never in the middle of a run (where it would look
  like an injected fault), and a batch is a cheap tensor index, so data loading
  adds no noise to step times. The cost is memory: ``3 * resolution**2`` bytes per
  image (3 KiB at 32x32, so 100,000 images take about 300 MiB); the workload is
  meant for small datasets.

Inputs are normalised per channel with the dataset's own mean and standard
deviation (computed once over all pixels in [0, 1] scale).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from jitbench.workloads.base import DataError

__all__ = ["ImageData", "load_digits_images", "load_image_folder", "load_images"]


@dataclass(frozen=True)
class ImageData:
    """A whole image-classification dataset in memory.

    Attributes:
        name: Short source name for descriptions (``sklearn-digits`` or
            ``imagefolder:<path>``).
        images: ``(N, 3, H, W)`` tensor, either ``uint8`` in 0..255 or ``float32``
            in [0, 1]; on the CPU.
        targets: ``(N,)`` ``int64`` class indices in ``[0, len(classes))``.
        classes: Class names; index ``k`` is label ``k``.
        mean: ``(3,)`` ``float32`` per-channel mean of the pixels in [0, 1] scale.
        std: ``(3,)`` ``float32`` per-channel standard deviation, same scale (> 0).
    """

    name: str
    images: torch.Tensor
    targets: torch.Tensor
    classes: list[str]
    mean: torch.Tensor
    std: torch.Tensor

    def __len__(self) -> int:
        return int(self.images.shape[0])

    @property
    def resolution(self) -> int:
        """Side length ``H == W`` of the stored images, in pixels."""
        return int(self.images.shape[-1])

    def get(self, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalised inputs ``(B, 3, H, W)`` float32 and targets ``(B,)`` int64 of ``ids``."""
        index = torch.as_tensor(ids, dtype=torch.long)
        x = self.images[index]
        x = x.float() / 255.0 if x.dtype == torch.uint8 else x.float()
        x = (x - self.mean.view(1, 3, 1, 1)) / self.std.view(1, 3, 1, 1)
        return x, self.targets[index]


def _channel_stats(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and std ((3,) float32) of ``(N, 3, H, W)`` images in [0, 1] scale."""
    x = images.double()
    if images.dtype == torch.uint8:
        x = x / 255.0
    mean = x.mean(dim=(0, 2, 3))
    std = x.std(dim=(0, 2, 3), unbiased=False)
    std = torch.where(std > 0, std, torch.ones_like(std))  # constant channel: leave it unscaled
    return mean.float(), std.float()


def _check_resolution(resolution: int) -> None:
    if not isinstance(resolution, int) or isinstance(resolution, bool) or resolution < 8:
        raise ValueError(f"image resolution must be an integer >= 8 pixels, got {resolution!r}")


@functools.lru_cache(maxsize=4)
def load_digits_images(resolution: int = 32) -> ImageData:
    """scikit-learn's bundled digits, upsampled to ``resolution`` and repeated to RGB.

    Returns 1,797 samples, 10 classes (``"0"`` .. ``"9"``), ``float32`` images in
    [0, 1] of shape ``(1797, 3, resolution, resolution)``. Cached per process (the
    tensors are shared: treat them as read-only).
    """
    _check_resolution(resolution)
    from sklearn.datasets import load_digits  # bundled with scikit-learn, no download

    digits = load_digits()
    small = torch.as_tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0  # (N,1,8,8)
    big = F.interpolate(small, size=(resolution, resolution), mode="bilinear",
                        align_corners=False, antialias=False).clamp_(0.0, 1.0)
    images = big.expand(-1, 3, -1, -1).contiguous()  # (N,3,R,R)
    targets = torch.as_tensor(digits.target, dtype=torch.long)
    mean, std = _channel_stats(images)
    return ImageData(name="sklearn-digits", images=images, targets=targets,
                     classes=[str(k) for k in range(10)], mean=mean, std=std)


def load_image_folder(root: str | os.PathLike[str], resolution: int = 32) -> ImageData:
    """Decode every image of an ImageFolder tree into ``uint8 (N, 3, R, R)``.

    Raises:
        DataError: ``root`` is missing, not a directory, empty, has no class
            sub-folders, has no image files, or any image cannot be read/decoded.
        ValueError: ``resolution`` is not an integer >= 8.
    """
    _check_resolution(resolution)
    from PIL import Image
    from torchvision import datasets, transforms

    path = Path(root).expanduser()
    if not path.exists():
        raise DataError(f"image data directory {str(path)!r} does not exist")
    if not path.is_dir():
        raise DataError(f"image data {str(path)!r} is not a directory "
                        "(expected an ImageFolder tree: <dir>/<class>/<image>)")
    try:
        entries = list(os.scandir(path))
    except OSError as e:
        raise DataError(f"cannot list image data directory {str(path)!r}: {e}") from e
    if not entries:
        raise DataError(f"image data directory {str(path)!r} is empty")
    if not any(e.is_dir() for e in entries):
        raise DataError(f"image data directory {str(path)!r} has no class sub-folders "
                        "(expected an ImageFolder tree: <dir>/<class>/<image>)")
    try:
        folder = datasets.ImageFolder(str(path))  # lists files only; decodes nothing
    except (FileNotFoundError, OSError) as e:
        raise DataError(f"image data directory {str(path)!r}: {e}") from e

    resize = transforms.Compose([transforms.Resize(resolution), transforms.CenterCrop(resolution),
                                 transforms.PILToTensor()])
    images = torch.empty((len(folder.samples), 3, resolution, resolution), dtype=torch.uint8)
    for i, (file, _) in enumerate(folder.samples):
        try:
            with Image.open(file) as img:
                rgb = img.convert("RGB")  # forces a full decode: truncated/corrupt data fails here
            images[i] = resize(rgb)
        except Exception as e:  # PIL raises OSError, ValueError, SyntaxError, DecompressionBombError...
            raise DataError(f"cannot read image {file!r}: {type(e).__name__}: {e}") from e
    targets = torch.as_tensor([label for _, label in folder.samples], dtype=torch.long)
    mean, std = _channel_stats(images)
    return ImageData(name=f"imagefolder:{path}", images=images, targets=targets,
                     classes=list(folder.classes), mean=mean, std=std)


def load_images(data: str | None, resolution: int = 32) -> ImageData:
    """The digits when ``data`` is None, else the ImageFolder tree at ``data``."""
    if data is None:
        return load_digits_images(resolution)
    return load_image_folder(data, resolution)
