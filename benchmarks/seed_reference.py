"""The seed tutorial's ``cifar_cnn_distributed.py``, ported as literally as possible to TF 2.18 / tf.keras 2.

This is the benchmark's reference: what a user would run instead of
cifar_dist. Every line of the 2018 script is kept in order; the only changes
are the ones TF 2.18 forces, each marked ``PORT:``:

- ``import keras`` / ``horovod.keras`` become ``tf.keras`` (tf-keras, Keras 2)
  and ``horovod.tensorflow.keras`` (the ``keras`` package is Keras 3 now, which
  Horovod 0.28 cannot drive);
- ``tf.ConfigProto`` GPU pinning becomes ``tf.config`` memory growth + visible device;
- ``keras.optimizers.rmsprop(lr=, decay=)`` is ``tf.keras.optimizers.legacy.RMSprop``
  (same update rule, same ``decay``);
- ``cifar10.load_data()`` reads the packaged real-image sample (``--data sample``)
  or a CIFAR-10 copy (``--data <path>``) instead of downloading;
- benchmark additions: ``--epochs`` (default: the seed's ceil(100 / size)),
  ``--metrics`` (per-epoch training images/s, val accuracy and wall times,
  test accuracy, peak RSS, as JSON) and ``--verbose``.

The model, ImageDataGenerator arguments, ``fit_generator(..., workers=4)``,
batch 32 and the final save/evaluate are the seed's -- including its slip:
the ``callbacks`` list (Horovod broadcast, rank-0 checkpoints) is built but
never passed to ``fit_generator``, so the seed writes no per-epoch checkpoints
(which flatters its speed; cifar_dist does write them).
"""

import argparse
import math
import os
import sys
import time

PROCESS_START = time.time()
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # PORT: tf.keras must be Keras 2 for Horovod 0.28

import tensorflow as tf  # noqa: E402

keras = tf.keras  # PORT: `import keras` (Keras 2 is tf-keras now)
import horovod.tensorflow.keras as hvd  # noqa: E402  PORT: `import horovod.keras as hvd`
from bench_common import EpochClock, load_arrays, peak_rss_mb, write_result  # noqa: E402  (benchmark additions)
from tensorflow.keras.layers import Activation, Conv2D, Dense, Dropout, Flatten, MaxPooling2D  # noqa: E402
from tensorflow.keras.models import Sequential  # noqa: E402
from tensorflow.keras.preprocessing.image import ImageDataGenerator  # noqa: E402

from cifar_dist.training.process.horovod_env import bind_horovod_to_tf_keras  # noqa: E402

bind_horovod_to_tf_keras()  # PORT: Horovod's callbacks use Keras 3's backend otherwise


# HOROVOD: initialize Horovod.
hvd.init()

# HOROVOD: pin GPU to be used to process local rank (one GPU per process)
# PORT: tf.ConfigProto(gpu_options.allow_growth, visible_device_list) -> tf.config
gpus = tf.config.list_physical_devices("GPU")
for gpu in gpus:
    tf.config.experimental.set_memory_growth(gpu, True)
if gpus:
    tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")

batch_size = 32
num_classes = 10
# HOROVOD: adjust number of epochs based on number of GPUs.
epochs = int(math.ceil(100.0 / hvd.size()))

data_augmentation = True
num_predictions = 20
# BATCH AI: change save directory to mounted storage path
parser = argparse.ArgumentParser()
parser.add_argument("-d", "--dir", help="directory to save model to", default=".")
parser.add_argument("--data", default="sample", help="PORT: 'sample' (packaged) or a CIFAR-10 path")
parser.add_argument("--epochs", type=int, default=0, help="benchmark: epochs (0 = the seed's ceil(100 / size))")
parser.add_argument("--metrics", default="", help="benchmark: write per-epoch timings/accuracies here (JSON)")
parser.add_argument("--verbose", type=int, default=1)
args = parser.parse_args()
if args.epochs:
    epochs = args.epochs
save_dir = os.path.join(args.dir, "saved_models")
model_name = "keras_cifar10_trained_model.h5"

# The data, split between train and test sets:
(x_train, y_train), (x_test, y_test) = load_arrays(args.data)  # PORT: cifar10.load_data()
print("x_train shape:", x_train.shape)
print(x_train.shape[0], "train samples")
print(x_test.shape[0], "test samples")

# Convert class vectors to binary class matrices.
y_train = keras.utils.to_categorical(y_train, num_classes)
y_test = keras.utils.to_categorical(y_test, num_classes)

model = Sequential()
model.add(Conv2D(32, (3, 3), padding="same", input_shape=x_train.shape[1:]))
model.add(Activation("relu"))
model.add(Conv2D(32, (3, 3)))
model.add(Activation("relu"))
model.add(MaxPooling2D(pool_size=(2, 2)))
model.add(Dropout(0.25))

model.add(Conv2D(64, (3, 3), padding="same"))
model.add(Activation("relu"))
model.add(Conv2D(64, (3, 3)))
model.add(Activation("relu"))
model.add(MaxPooling2D(pool_size=(2, 2)))
model.add(Dropout(0.25))

model.add(Flatten())
model.add(Dense(512))
model.add(Activation("relu"))
model.add(Dropout(0.5))
model.add(Dense(num_classes))
model.add(Activation("softmax"))

# HOROVOD: adjust learning rate based on number of GPUs.
opt = keras.optimizers.legacy.RMSprop(learning_rate=0.0001 * hvd.size(), decay=1e-6)  # PORT: rmsprop(lr=...)

# HOROVOD: add Horovod Distributed Optimizer.
opt = hvd.DistributedOptimizer(opt)

# Let's train the model using RMSprop
model.compile(loss="categorical_crossentropy", optimizer=opt, metrics=["accuracy"])

callbacks = [
    # HOROVOD: broadcast initial variable states from rank 0 to all other processes.
    # This is necessary to ensure consistent initialization of all workers when
    # training is started with random weights or restored from a checkpoint.
    hvd.callbacks.BroadcastGlobalVariablesCallback(0),
]

# HOROVOD: save checkpoints only on worker 0 to prevent other workers from corrupting them.
if hvd.rank() == 0:
    callbacks.append(keras.callbacks.ModelCheckpoint(os.path.join(args.dir, "checkpoint-{epoch}.h5")))

x_train = x_train.astype("float32")
x_test = x_test.astype("float32")
x_train /= 255
x_test /= 255

clock = EpochClock(len(x_train), PROCESS_START)  # benchmark addition
if not data_augmentation:
    print("Not using data augmentation.")
    model.fit(
        x_train,
        y_train,
        batch_size=batch_size,
        epochs=epochs,
        validation_data=(x_test, y_test),
        shuffle=True,
        callbacks=[clock],
    )
else:
    print("Using real-time data augmentation.")
    # This will do preprocessing and realtime data augmentation:
    datagen = ImageDataGenerator(
        featurewise_center=False,  # set input mean to 0 over the dataset
        samplewise_center=False,  # set each sample mean to 0
        featurewise_std_normalization=False,  # divide inputs by std of the dataset
        samplewise_std_normalization=False,  # divide each input by its std
        zca_whitening=False,  # apply ZCA whitening
        zca_epsilon=1e-06,  # epsilon for ZCA whitening
        rotation_range=0,  # randomly rotate images in the range (degrees, 0 to 180)
        width_shift_range=0.1,  # randomly shift images horizontally (fraction of total width)
        height_shift_range=0.1,  # randomly shift images vertically (fraction of total height)
        shear_range=0.0,  # set range for random shear
        zoom_range=0.0,  # set range for random zoom
        channel_shift_range=0.0,  # set range for random channel shifts
        fill_mode="nearest",  # set mode for filling points outside the input boundaries
        cval=0.0,  # value used for fill_mode = "constant"
        horizontal_flip=True,  # randomly flip images
        vertical_flip=False,  # randomly flip images
        rescale=None,  # set rescaling factor (applied before any other transformation)
        preprocessing_function=None,  # set function that will be applied on each input
        data_format=None,  # image data format, either "channels_first" or "channels_last"
        validation_split=0.0,  # fraction of images reserved for validation (strictly between 0 and 1)
    )

    # Compute quantities required for feature-wise normalization
    # (std, mean, and principal components if ZCA whitening is applied).
    datagen.fit(x_train)

    # Fit the model on the batches generated by datagen.flow().
    model.fit_generator(
        datagen.flow(x_train, y_train, batch_size=batch_size),
        epochs=epochs,
        validation_data=(x_test, y_test),
        workers=4,
        # As in the seed, `callbacks` (broadcast, checkpoints) is built but never
        # passed to fit: the seed writes no checkpoints. Only the benchmark's clock is.
        callbacks=[clock],
        verbose=args.verbose if hvd.rank() == 0 else 0,
    )

# Save model and weights
if not os.path.isdir(save_dir):
    os.makedirs(save_dir)
model_path = os.path.join(save_dir, model_name)
model.save(model_path)
print("Saved trained model at %s " % model_path)

# Score trained model.
scores = model.evaluate(x_test, y_test, verbose=args.verbose)
print("Test loss:", scores[0])
print("Test accuracy:", scores[1])

if args.metrics and hvd.rank() == 0:
    write_result(
        args.metrics,
        variant="seed_reference",
        ranks=hvd.size(),
        batch_size=batch_size,
        train_images=int(len(x_train)),
        epochs=clock.epochs,
        test={"loss": float(scores[0]), "accuracy": float(scores[1])},
        wall_time_s=time.time() - PROCESS_START,
        peak_rss_mb_per_rank=[peak_rss_mb()],
        tensorflow=tf.__version__,
        argv=sys.argv[1:],
    )
