// conveyor/image/describe.hpp — the image module's option structs described (Boost.Describe),
// for `detail::read_options` and `detail::option_to_json`: the Python module's `decode()`
// and `batch()` keywords are these fields. Members that hold objects rather than values
// (`decode_image_options::stats`, `label_map_options::map`, `collate_options::allocator`
// and `pool`, `field_options::by_name` and `by_extension`) are given in C++ only and not
// described. The fields' meaning is documented
// once, where each struct is declared.
#ifndef CONVEYOR_IMAGE_DESCRIBE_HPP
#define CONVEYOR_IMAGE_DESCRIBE_HPP

#include <conveyor/core/describe.hpp>
#include <conveyor/image/batch.hpp>
#include <conveyor/image/columns.hpp>
#include <conveyor/image/decode.hpp>
#include <conveyor/image/dtype.hpp>
#include <conveyor/image/fields.hpp>
#include <conveyor/image/labels.hpp>
#include <conveyor/image/stage.hpp>

#include <boost/describe/class.hpp>
#include <boost/describe/enum.hpp>

namespace conveyor::image {

BOOST_DESCRIBE_ENUM(pixel_format, rgb, bgr, gray)
BOOST_DESCRIBE_ENUM(crop_mode, none, center, random_resized)
BOOST_DESCRIBE_ENUM(jpeg_crop_method, decode_region, decode_then_crop, transform_then_decode)
BOOST_DESCRIBE_ENUM(label_lookup, automatic, position, key_number, key)
BOOST_DESCRIBE_ENUM(dtype, uint8, int64, float16, float32)
BOOST_DESCRIBE_ENUM(tensor_layout, nhwc, nchw)

BOOST_DESCRIBE_STRUCT(extent, (), (width, height))
BOOST_DESCRIBE_STRUCT(decode_options, (),
                      (format, size, crop, scale, ratio, center_fraction, dct_scaling, jpeg_crop, flip, seed, strict, max_pixels))
BOOST_DESCRIBE_STRUCT(json_label, (), (field, path))
BOOST_DESCRIBE_STRUCT(label_map_options, (), (by, first_number))
BOOST_DESCRIBE_STRUCT(field_options, (), (image, only, max_json_bytes, max_json_depth, max_npy_header_bytes))
BOOST_DESCRIBE_STRUCT(fields_queue_options, (), (concurrency, ordered, capacity, errors))
BOOST_DESCRIBE_STRUCT(collate_fields_options, (), (fields, partial, capacity, errors))
BOOST_DESCRIBE_STRUCT(decode_image_options, (),
                      (decode, fields, label_field, label_json, label_map, concurrency, errors, extra_fields, extra_decode))
BOOST_DESCRIBE_STRUCT(decoded_queue_options, (), (ordered, capacity))
BOOST_DESCRIBE_STRUCT(collate_options, (), (size, layout, type, mean, std, partial, capacity, slabs))

} // namespace conveyor::image

#endif
