"""The Keras 3 user model the training/ tests train on the Horovod engine (test_keras3.py) and on JAX
(test_engine_jax.py): the source of a user's ``mymodels3.py``, written into a project folder by each module."""

import textwrap

MODEL = textwrap.dedent('''
    """A Keras 3 model as today's Keras guides write one."""
    import keras


    @keras.saving.register_keras_serializable("mymodels3")
    class Scale(keras.layers.Layer):
        def __init__(self, factor=1.0, **kwargs):
            super().__init__(**kwargs)
            self.factor = factor

        def call(self, x):
            return x * self.factor

        def get_config(self):
            return {**super().get_config(), "factor": self.factor}


    def build(num_classes, width=8):
        inputs = keras.Input(shape=(32, 32, 3))
        x = keras.layers.Conv2D(width, 3, padding="same", use_bias=False)(inputs)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.Activation("relu")(x)
        x = keras.layers.MaxPooling2D()(x)
        x = keras.layers.Dropout(0.25)(x)
        x = keras.layers.GlobalAveragePooling2D()(x)
        x = Scale(2.0)(keras.layers.Dense(num_classes)(x))
        return keras.Model(inputs, keras.layers.Activation("softmax", dtype="float32")(x), name="k3")


    def mixed(num_classes):
        import tensorflow as tf

        inputs = keras.Input(shape=(32, 32, 3))
        x = keras.layers.Flatten()(inputs)
        return keras.Model(inputs, tf.keras.layers.Dense(num_classes, activation="softmax")(x))


    class Unregistered(keras.layers.Layer):
        def call(self, x):
            return x


    def unsaveable(num_classes):
        inputs = keras.Input(shape=(32, 32, 3))
        x = Unregistered()(keras.layers.Flatten()(inputs))
        return keras.Model(inputs, keras.layers.Dense(num_classes, activation="softmax")(x))
''')
