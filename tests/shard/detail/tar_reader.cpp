// Tests of conveyor/shard/detail/tar_reader.hpp (placeholder until that header lands).
