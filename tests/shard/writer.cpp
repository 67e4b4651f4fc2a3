// Tests of conveyor/shard/writer.hpp (placeholder until that header lands).
