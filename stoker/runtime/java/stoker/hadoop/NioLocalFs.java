package stoker.hadoop;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;

/**
 * FileContext's checksummed local file system (Hadoop's LocalFs) over {@link NioRawLocalFs}:
 * `fs.AbstractFileSystem.file.impl`, which Spark's streaming checkpoint writes through.
 */
public class NioLocalFs extends ChecksumFs {
  public NioLocalFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
    super(new NioRawLocalFs(uri, conf));
  }
}
