// conveyor/s3/xml.hpp — transitional forwarder: the S3 XML documents are internal now, in
// conveyor/s3/detail/xml.hpp (namespace conveyor::s3::detail); object_info and list_page
// are in conveyor/s3/client.hpp. Kept only until conveyor/conveyor.hpp stops including
// this file; then it goes.
#ifndef CONVEYOR_S3_XML_HPP
#define CONVEYOR_S3_XML_HPP

#include <conveyor/s3/client.hpp>

#endif
