"""Taxi-fare regression: CSV through tf.data, bucketized and crossed locations, a DNN.

The shape of the course trainer: raw CSV columns in, fare out. Feature engineering lives in
the model, so the exported SavedModel takes the raw columns (``pickup_datetime`` as text).
"""

from __future__ import annotations

import logging
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

log = logging.getLogger(__name__)

CSV_COLUMNS = [
    "fare_amount", "pickup_datetime", "pickup_longitude", "pickup_latitude",
    "dropoff_longitude", "dropoff_latitude", "passenger_count", "key",
]
LABEL_COLUMN = "fare_amount"
DEFAULTS = [[0.0], ["na"], [0.0], [0.0], [0.0], [0.0], [0.0], ["na"]]
NUMERIC = ["pickup_longitude", "pickup_latitude", "dropoff_longitude", "dropoff_latitude", "passenger_count"]
INPUTS = ["pickup_datetime", *NUMERIC]
# New York City, where the trips are; locations outside fall in the edge buckets.
LAT_RANGE = (40.55, 40.95)
LON_RANGE = (-74.10, -73.70)


def features_and_label(row: dict):
    label = row.pop(LABEL_COLUMN)
    return {name: row[name] for name in INPUTS}, label


def load_dataset(pattern: str, batch_size: int, *, training: bool, seed: int | None = None) -> tf.data.Dataset:
    """Batches of (raw feature dict, fare) from headerless CSV files matching ``pattern``.

    Training data repeats and shuffles; evaluation data is read once in order.
    """
    files = tf.io.gfile.glob(pattern)
    if not files:
        raise FileNotFoundError(f"{pattern}: matches no file; check --train_data_path/--eval_data_path")
    ds = tf.data.experimental.make_csv_dataset(
        sorted(files), batch_size=batch_size, column_names=CSV_COLUMNS, column_defaults=DEFAULTS,
        header=False, shuffle=training, shuffle_seed=seed, num_epochs=None if training else 1,
        num_parallel_reads=min(len(files), 4), sloppy=False,
    )
    return ds.map(features_and_label, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def _time_features(dt):
    """Hour of day (0-23) and day of week (0=Sunday) from "YYYY-MM-DD HH:MM:SS UTC"."""
    def num(start, length):
        return tf.strings.to_number(tf.strings.substr(dt, start, length), tf.int32)

    year, month, day, hour = num(0, 4), num(5, 2), num(8, 2), num(11, 2)
    # Sakamoto's day-of-week algorithm, vectorised.
    offsets = tf.constant([0, 3, 2, 5, 0, 3, 5, 1, 4, 6, 2, 4])
    year = year - tf.cast(month < 3, tf.int32)
    dow = (year + year // 4 - year // 100 + year // 400 + tf.gather(offsets, month - 1) + day) % 7
    return hour, dow


def _bins(low: float, high: float, nbuckets: int) -> list[float]:
    return np.linspace(low, high, nbuckets + 1)[1:-1].tolist()


def build_model(*, nbuckets: int = 10, nnsize: list[int] | None = None, lr: float = 0.001) -> keras.Model:
    """The DNN on raw inputs; its metric ``rmse`` is the tuning metric."""
    nnsize = nnsize or [32, 8]
    inputs = {name: keras.Input(shape=(1,), name=name, dtype="float32") for name in NUMERIC}
    inputs["pickup_datetime"] = keras.Input(shape=(1,), name="pickup_datetime", dtype="string")

    plon, plat = inputs["pickup_longitude"], inputs["pickup_latitude"]
    dlon, dlat = inputs["dropoff_longitude"], inputs["dropoff_latitude"]
    hour, dow = keras.layers.Lambda(lambda dt: _time_features(dt), name="time_features")(inputs["pickup_datetime"])

    def scaled(x, low, high, name):
        return keras.layers.Rescaling(1.0 / (high - low), offset=-low / (high - low), name=name)(x)

    dense = [
        scaled(plon, *LON_RANGE, "plon_scaled"), scaled(plat, *LAT_RANGE, "plat_scaled"),
        scaled(dlon, *LON_RANGE, "dlon_scaled"), scaled(dlat, *LAT_RANGE, "dlat_scaled"),
        keras.layers.Lambda(lambda t: tf.sqrt(tf.square((t[0] - t[1]) * 0.76) + tf.square(t[2] - t[3])) * 100.0,
                            name="euclidean")([plon, dlon, plat, dlat]),
        keras.layers.Rescaling(0.25, name="passengers")(inputs["passenger_count"]),
    ]

    lat_b = keras.layers.Discretization(bin_boundaries=_bins(*LAT_RANGE, nbuckets), name="lat_buckets")
    lon_b = keras.layers.Discretization(bin_boundaries=_bins(*LON_RANGE, nbuckets), name="lon_buckets")
    cells = nbuckets * nbuckets
    ploc = keras.layers.HashedCrossing(cells, name="pickup_cell")((lat_b(plat), lon_b(plon)))
    dloc = keras.layers.HashedCrossing(cells, name="dropoff_cell")((lat_b(dlat), lon_b(dlon)))
    pair = keras.layers.HashedCrossing(cells * cells, name="pickup_dropoff")((ploc, dloc))
    day_hour = keras.layers.HashedCrossing(24 * 7, name="day_hour")((dow, hour))

    def embed(x, size, dim, name):
        return keras.layers.Flatten()(keras.layers.Embedding(size, dim, name=name)(x))

    sparse = [
        keras.layers.CategoryEncoding(cells, output_mode="one_hot", name="pickup_onehot")(ploc),
        keras.layers.CategoryEncoding(cells, output_mode="one_hot", name="dropoff_onehot")(dloc),
        embed(pair, cells * cells, 10, "pair_embedding"),
        embed(day_hour, 24 * 7, 4, "day_hour_embedding"),
    ]
    x = keras.layers.Concatenate(name="features")(dense + sparse)
    for i, units in enumerate(nnsize):
        x = keras.layers.Dense(units, activation="relu", name=f"h{i + 1}")(x)
    output = keras.layers.Dense(1, name="fare")(x)
    model = keras.Model(inputs, output, name="taxifare")
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=lr), loss="mse",
                  metrics=[keras.metrics.RootMeanSquaredError(name="rmse"), "mse"])
    return model
