"""Datasets (registry + loaders that read local files only) and client partitioning."""

from leakshield.data import celeba, cifar, digits, idx, imagefolder, npz, svhn, tinyimagenet  # noqa: F401
from leakshield.data.partition import (
    ByClassPartition,
    DirichletPartition,
    FixedSizePartition,
    IIDPartition,
    PartitionConfig,
    partition_indices,
)
from leakshield.data.registry import DATASETS, DatasetParams, list_datasets, load_dataset
from leakshield.data.types import DatasetInfo, DatasetSplits, ImageSet

__all__ = [
    "DATASETS",
    "ByClassPartition",
    "DatasetInfo",
    "DatasetParams",
    "DatasetSplits",
    "DirichletPartition",
    "FixedSizePartition",
    "IIDPartition",
    "ImageSet",
    "PartitionConfig",
    "list_datasets",
    "load_dataset",
    "partition_indices",
]
