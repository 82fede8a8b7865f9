"""The project's Hydra configs, shipped inside the package so a wheel finds them from any folder
(``pkg://recsys_seq.conf``). Users add their own folder with ``hydra.searchpath``."""
