"""The datasets' REST handlers (``/datasets``): thin, over ``Datasets``
(service/datasets/registry.py)."""
from __future__ import annotations

from gpuspawner.times import iso
from gpuspawner.service.api.base import APIHandler
from gpuspawner.service.datasets.registry import Dataset
from gpuspawner.vocab.datasets import mount_point


def dataset_view(d: Dataset, size=None) -> dict:
    """A dataset as the API shows it; ``size``: its last measure (space_usage.Usage), if any."""
    return {"name": d.name, "team": d.team, "path": d.path, "mount": mount_point(d.name),
            "created_by": d.created_by, "created_at": iso(d.created_at),
            "shared_with": list(d.shared_with), "pools": list(d.pools),
            "node_labels": dict(d.node_labels),
            "size_bytes": size.bytes if size else None,
            "files": size.files if size else None,
            "measured_at": iso(size.measured_at) if size else None}


class DatasetAPI(APIHandler):
    @property
    def datasets(self):
        return self.gpuhub.datasets

    def write_dataset(self, d: Dataset, status: int = 200) -> None:
        self.write_json(dataset_view(d, self.datasets.sizes.get(d.name)), status=status)

    def no_content(self) -> None:
        self.set_status(204)
        self.clear_header("Content-Type")
        self.finish()


class DatasetsHandler(DatasetAPI):
    def get(self):
        self.write_json({"datasets": [dataset_view(d, self.datasets.sizes.get(d.name))
                                      for d in self.datasets.listing(self.identity)]})

    def post(self):
        d = self.datasets.create(self.identity, self.json_body())
        self.set_header("Location", f"{self.gpuhub.api_prefix}datasets/{d.name}")
        self.write_dataset(d, status=201)


class DatasetHandler(DatasetAPI):
    def get(self, name: str):
        self.write_dataset(self.datasets.get(self.identity, name))

    def delete(self, name: str):
        self.datasets.delete(self.identity, name)
        self.no_content()


class DatasetShareHandler(DatasetAPI):
    def put(self, name: str, team: str):
        self.write_dataset(self.datasets.share(self.identity, name, team))

    def delete(self, name: str, team: str):
        self.datasets.unshare(self.identity, name, team)
        self.no_content()


class ServerDatasetsHandler(DatasetAPI):
    """POST by the hub's spawner as a notebook server starts: its datasets'
    folders, checked again and the use audited (``Datasets.server_mounts``)."""

    def post(self, wid: str):
        self.write_json({"datasets": [{"name": name, "path": path, "mount": mount_point(name)}
                                      for name, path in self.datasets.server_mounts(
                                          self.identity, wid)]})
